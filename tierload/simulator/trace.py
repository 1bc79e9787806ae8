"""Access traces: the block accesses a TieredDataset configuration makes, or a recorded file.

An access is one *run* of :func:`tierload.data.runs.plan_runs`: what the node cache counts,
prefetches and asks the hot tier's policy about. A generated trace repeats exactly what a
running job plans, step by step: the epoch order (:func:`tierload.data.order.epoch_order`), the
rank's slice (:func:`tierload.data.order.rank_slice`), the plan with the next epoch's order as
look-ahead, cut into runs, of which the ones starting inside the epoch are counted.

DataLoader workers do not change the trace: the node cache schedules a rank's runs in the
rank's order whatever the number of workers, and the loader yields exactly that order
(:mod:`tierload.data.order`, rule 3; ``tests/test_simulator.py`` rebuilds it from
:func:`tierload.data.order.worker_positions`). Ranks and jobs are interleaved as they progress
together: by their position within the epoch, one run each in turn on ties, as the node
cache's scheduler serves its streams.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from tierload.data.block_columns import block_lengths
from tierload.data.mixture import Mixture
from tierload.data.order import SHUFFLE_MODES, epoch_order, rank_slice, resolve_shuffle, reuse_gap
from tierload.data.runs import counted_runs
from tierload.errors import ConfigError, ManifestError

DEFAULT_BLOCK_BYTES = 2**20
Progress = Callable[[int, int], None]  # replays report (accesses done, accesses in all)
PROGRESS_EVERY = 1 << 16  # accesses between progress calls


@dataclass(frozen=True, eq=False)
class DatasetShape:
    """The blocks and samples of a dataset, without its bytes.

    Attributes:
        sample_block: int64 (samples,): block index of each sample.
        block_bytes: int64 (blocks,): size of each block in bytes.
        name: Jobs that name the same dataset read the same blocks (and share warm copies).
        mixture: A weighted mixture of sources (:meth:`mixed`): its order replaces the shuffle
            (the job's ``shuffle`` and ``window_blocks`` are the mixture's own), or None.
    """

    sample_block: np.ndarray
    block_bytes: np.ndarray
    name: str = "dataset"
    mixture: Mixture | None = None

    def __post_init__(self) -> None:
        if len(self.block_bytes) == 0:
            raise ConfigError(f"dataset {self.name!r} has no blocks")
        if len(self.sample_block) and (self.sample_block.min() < 0 or self.sample_block.max() >= len(self.block_bytes)):
            raise ConfigError(f"dataset {self.name!r}: sample_block refers to blocks outside "
                              f"[0, {len(self.block_bytes)})")
        if self.block_bytes.min() < 0:
            raise ConfigError(f"dataset {self.name!r}: block sizes must be >= 0 bytes")

    @classmethod
    def uniform(cls, num_blocks: int, block_bytes: int = DEFAULT_BLOCK_BYTES, *, samples_per_block: int = 1,
                size_spread: float = 0.0, seed: int = 0, name: str = "dataset") -> "DatasetShape":
        """``num_blocks`` blocks of ``samples_per_block`` samples each.

        Args:
            num_blocks: Blocks in the dataset (>= 1).
            block_bytes: Mean block size in bytes (>= 1).
            samples_per_block: Samples in each block (>= 1; above 1 the blocks are like Parquet
                row groups and the trace uses block-aware shuffle).
            size_spread: Sigma of a log-normal spread of block sizes around ``block_bytes``
                (0: all blocks equal).
            seed: Seed of the size spread.
            name: See :attr:`name`.

        Raises:
            ConfigError: A count or size out of range.
        """
        if num_blocks < 1 or block_bytes < 1 or samples_per_block < 1 or size_spread < 0:
            raise ConfigError(f"num_blocks={num_blocks}, block_bytes={block_bytes}, samples_per_block="
                              f"{samples_per_block}, size_spread={size_spread}: counts and sizes must be >= 1, "
                              "the spread >= 0")
        if size_spread > 0:
            rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x512E])
            # exp(sigma z - sigma^2 / 2) has mean 1, so the mean block stays block_bytes.
            factors = np.exp(size_spread * rng.standard_normal(num_blocks) - size_spread**2 / 2)
            sizes = np.maximum(1, np.rint(block_bytes * factors)).astype(np.int64)
        else:
            sizes = np.full(num_blocks, block_bytes, dtype=np.int64)
        sample_block = np.repeat(np.arange(num_blocks, dtype=np.int64), samples_per_block)
        return cls(sample_block, sizes, name)

    @classmethod
    def from_manifest(cls, path: str | os.PathLike) -> "DatasetShape":
        """The shape of a dataset from a cached manifest file (Arrow IPC, or JSON) (see :mod:`tierload.data.manifest`).

        Raises:
            ConfigError: The file is missing or is not a tierload manifest.
        """
        from tierload.data.manifest import open_manifest

        file = Path(path).expanduser()
        try:
            manifest = open_manifest(file)
        except FileNotFoundError:
            raise ConfigError(f"manifest file {str(file)!r} does not exist") from None
        except (ValueError, KeyError, ManifestError) as exc:
            raise ConfigError(f"{str(file)!r} is not a tierload manifest: {exc}") from None
        sizes = np.array(block_lengths(manifest.blocks), dtype=np.int64)
        return cls(manifest.sample_block.astype(np.int64), sizes, manifest.url)

    @classmethod
    def mixed(cls, parts: Sequence["DatasetShape"], weights: Sequence[float], *, shuffle: str = "auto",
              window_blocks: int = 8, epoch_samples: int | None = None) -> "DatasetShape":
        """Several datasets with weights as one (see :mod:`tierload.data.mixture`): blocks and
        samples concatenated, the mixed order as a TieredDataset over these sources reads it.

        Raises:
            ConfigError: Bad weights (one per part, >= 0, one > 0) or an empty part.
        """
        mixture = Mixture(tuple(part.sample_block for part in parts), tuple(part.num_blocks for part in parts),
                          tuple(weights), tuple(part.shuffle_mode(shuffle) for part in parts),
                          window_blocks=window_blocks, epoch_samples=epoch_samples)
        name = "mixture:" + "|".join(f"{part.name}={weight:g}"
                                     for part, weight in zip(parts, mixture.weights, strict=True))
        return cls(mixture.sample_block(), np.concatenate([part.block_bytes for part in parts]), name, mixture)

    def epoch_samples(self, epoch: int = 0) -> int:
        """Samples an epoch's order holds (a mixture's, or every sample once)."""
        return self.mixture.samples_per_epoch(epoch) if self.mixture is not None else self.num_samples

    @property
    def num_blocks(self) -> int:
        return len(self.block_bytes)

    @property
    def num_samples(self) -> int:
        return len(self.sample_block)

    @property
    def total_bytes(self) -> int:
        return int(self.block_bytes.sum())

    def reuse_gap(self, window_blocks: int) -> int:
        """Run grouping of a TieredDataset over this shape (:func:`tierload.data.order.reuse_gap`)."""
        if self.mixture is not None:
            return self.mixture.reuse_gap()
        return reuse_gap(self.sample_block, window_blocks)

    def shuffle_mode(self, shuffle: str) -> str:
        """``"auto"`` resolved as TieredDataset does (:func:`tierload.data.order.resolve_shuffle`)."""
        return resolve_shuffle(shuffle, self.num_samples, self.num_blocks)


@dataclass(frozen=True)
class JobSpec:
    """One training job as a TieredDataset would run it.

    Attributes:
        dataset: What it reads.
        epochs: Epochs it runs (>= 1), numbered from 0.
        seed: Its shuffle seed.
        world_size: Ranks (>= 1).
        nodes: Nodes its ranks run on, each with its own hot tier (default: one rank per
            node); ranks fill nodes in order, ``world_size / nodes`` per node.
        shuffle: ``"auto"`` (as TieredDataset), ``"sample"``, ``"block"`` or ``"none"``.
        window_blocks: Blocks per shuffle window in block mode.
        drop_last: As TieredDataset's.
        start: When the job starts, in epochs after the first job started (>= 0).
    """

    dataset: DatasetShape
    epochs: int = 4
    seed: int = 0
    world_size: int = 1
    nodes: int | None = None
    shuffle: str = "auto"
    window_blocks: int = 8
    drop_last: bool = False
    start: float = 0.0

    def __post_init__(self) -> None:
        nodes = self.world_size if self.nodes is None else self.nodes
        if self.epochs < 1 or self.world_size < 1 or not 1 <= nodes <= self.world_size:
            raise ConfigError(f"epochs={self.epochs}, world_size={self.world_size}, nodes={self.nodes}: need "
                              "epochs >= 1 and 1 <= nodes <= world_size")
        if self.shuffle not in (*SHUFFLE_MODES, "auto"):
            raise ConfigError(f"shuffle={self.shuffle!r}; choose one of auto, {', '.join(SHUFFLE_MODES)}")
        if self.window_blocks < 1 or self.start < 0:
            raise ConfigError(f"window_blocks={self.window_blocks}, start={self.start}: need window_blocks >= 1 "
                              "and start >= 0")

    @property
    def num_nodes(self) -> int:
        return self.world_size if self.nodes is None else self.nodes

    def node_of(self, rank: int) -> int:
        """The node (0-based, within this job) that ``rank`` runs on."""
        return rank * self.num_nodes // self.world_size


@dataclass(frozen=True, eq=False)
class Trace:
    """A sequence of block accesses, in the order the tiers see them.

    Attributes:
        block: int64 (accesses,): block index of each access.
        node: int64 (accesses,): the node (hot tier) that made it.
        epoch: float64 (accesses,): the decay clock of the access (the job's epoch number).
        block_bytes: int64 (blocks,): size of each block in bytes.
        job: int64 (accesses,): the job that made it.
        keys: Block names, indexed like ``block_bytes`` (recorded traces), else None.
    """

    block: np.ndarray
    node: np.ndarray
    epoch: np.ndarray
    block_bytes: np.ndarray
    job: np.ndarray = field(default=None)  # type: ignore[arg-type]  # None: filled in __post_init__
    keys: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.job is None:
            object.__setattr__(self, "job", np.zeros(len(self.block), dtype=np.int64))
        if not len(self.block) == len(self.node) == len(self.epoch) == len(self.job):
            raise ConfigError("trace columns differ in length")

    def __len__(self) -> int:
        return len(self.block)

    @property
    def num_nodes(self) -> int:
        return int(self.node.max()) + 1 if len(self.node) else 0

    @property
    def num_jobs(self) -> int:
        return int(self.job.max()) + 1 if len(self.job) else 0

    @property
    def num_blocks(self) -> int:
        return len(self.block_bytes)

    def distinct_bytes(self) -> int:
        """Bytes of the blocks the trace touches at least once (the working set)."""
        return int(self.block_bytes[self.touched()].sum()) if len(self.block) else 0

    def touched(self) -> np.ndarray:
        """bool (blocks,): the blocks the trace reads at least once (a mask: no sort of the trace)."""
        mask = np.zeros(self.num_blocks, dtype=bool)
        mask[self.block] = True
        return mask

    @classmethod
    def from_blocks(cls, blocks: Sequence[int], block_bytes: int | Sequence[int] = 1, *,
                    epochs: Sequence[float] | None = None, nodes: Sequence[int] | None = None) -> "Trace":
        """A trace from a plain list of block indices (hand-written examples, tests).

        Args:
            blocks: Block index of each access.
            block_bytes: One size for every block, or the size of each block.
            epochs: Decay clock of each access (default 0).
            nodes: Node of each access (default 0).
        """
        block = np.asarray(blocks, dtype=np.int64)
        count = int(block.max()) + 1 if len(block) else 0
        sizes = (np.full(count, block_bytes, dtype=np.int64) if np.isscalar(block_bytes)
                 else np.asarray(block_bytes, dtype=np.int64))
        return cls(block, np.zeros(len(block), np.int64) if nodes is None else np.asarray(nodes, np.int64),
                   np.zeros(len(block)) if epochs is None else np.asarray(epochs, np.float64), sizes)


def _epoch_order(job: JobSpec, epoch: int) -> np.ndarray:
    shape = job.dataset
    if shape.mixture is not None:
        return shape.mixture.epoch_order(job.seed, epoch)
    return epoch_order(shape.sample_block, seed=job.seed, epoch=epoch, shuffle=shape.shuffle_mode(job.shuffle),
                       window_blocks=job.window_blocks)


def _counted_runs(job: JobSpec, rank: int, order: np.ndarray, next_order: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    shape = job.dataset
    mine = rank_slice(order, rank=rank, world_size=job.world_size, drop_last=job.drop_last)
    ahead = rank_slice(next_order, rank=rank, world_size=job.world_size, drop_last=job.drop_last)
    # The plan carries the next epoch's order as look-ahead (TieredDataset._iterate); a run may
    # straddle the boundary and is then counted in this epoch, as the live stream counts it.
    run_block, run_start = counted_runs(shape.sample_block[mine], shape.sample_block[ahead],
                                        shape.reuse_gap(job.window_blocks))
    return run_block, run_start, len(mine)


def rank_epoch_runs(job: JobSpec, epoch: int, rank: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The counted block accesses of one rank in one epoch, as its node cache stream plans them.

    Returns:
        ``(run_block, run_start, consume_len)``: block and first position (int64 arrays, in
        order) of every run the stream counts, and the number of positions the rank consumes.
    """
    return _counted_runs(job, rank, _epoch_order(job, epoch), _epoch_order(job, epoch + 1))


def job_trace(jobs: Sequence[JobSpec] | JobSpec) -> Trace:
    """The trace of one or more jobs running together.

    Jobs reading datasets of the same name share blocks; every job runs on nodes of its own.

    Raises:
        ConfigError: No job, or two different datasets with the same name.
    """
    jobs = [jobs] if isinstance(jobs, JobSpec) else list(jobs)
    if not jobs:
        raise ConfigError("a trace needs at least one job")
    block_offset: dict[str, tuple[DatasetShape, int]] = {}
    sizes: list[np.ndarray] = []
    columns: dict[str, list[np.ndarray]] = {name: [] for name in ("block", "node", "epoch", "job", "time", "rank")}
    node_offset = 0
    for job_index, job in enumerate(jobs):
        shape = job.dataset
        known = block_offset.get(shape.name)
        if known is None:
            known = block_offset[shape.name] = (shape, sum(len(s) for s in sizes))
            sizes.append(shape.block_bytes)
        elif known[0] is not shape and not (np.array_equal(known[0].block_bytes, shape.block_bytes)
                                             and np.array_equal(known[0].sample_block, shape.sample_block)):
            raise ConfigError(f"two different datasets are both named {shape.name!r}; name them apart")
        offset = known[1]
        next_order = _epoch_order(job, 0)
        for epoch in range(job.epochs):
            order, next_order = next_order, _epoch_order(job, epoch + 1)
            for rank in range(job.world_size):
                run_block, run_start, consume_len = _counted_runs(job, rank, order, next_order)
                count = len(run_block)
                columns["block"].append(run_block + offset)
                columns["node"].append(np.full(count, node_offset + job.node_of(rank), dtype=np.int64))
                columns["epoch"].append(np.full(count, float(epoch)))
                columns["job"].append(np.full(count, job_index, dtype=np.int64))
                columns["time"].append(job.start + epoch + run_start / max(consume_len, 1))
                columns["rank"].append(np.full(count, rank, dtype=np.int64))
        node_offset += job.num_nodes
    merged = {name: np.concatenate(parts) for name, parts in columns.items()}
    # Ranks and jobs progress together; on equal progress, one run each in turn.
    order = np.lexsort((merged["rank"], merged["job"], merged["time"]))
    return Trace(merged["block"][order], merged["node"][order], merged["epoch"][order],
                 np.concatenate(sizes), merged["job"][order])
