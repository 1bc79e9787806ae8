"""The sample order of an epoch, and how it is split over ranks and DataLoader workers.

Everything here is a pure function of (seed, epoch, sizes), so every process (each rank,
each worker, the node cache planning prefetches) computes the same order on its own.

Split rule (documented for users):

1. The epoch order is a permutation of all samples (``shuffle="sample"``), or the block order
   shuffled and then samples shuffled within windows of ``window_blocks`` consecutive blocks
   (``shuffle="block"``, as MosaicML Streaming and WebDataset do), or the manifest order.
2. Ranks get contiguous, equal slices. ``drop_last=False`` (default, like PyTorch's
   DistributedSampler) pads the order by repeating its first samples so every rank gets
   ``ceil(N / world_size)``; ``drop_last=True`` trims to ``floor(N / world_size)`` per rank.
3. A rank's slice is cut into chunks of ``batch_size`` samples; DataLoader worker ``w`` of
   ``W`` takes chunks ``w, w+W, w+2W, ...``. PyTorch's DataLoader takes one batch from each
   worker in turn, so with the same batch size the loader yields exactly the rank's order,
   only the last batch can be partial, and ``len(loader)`` is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np

SHUFFLE_MODES = ("none", "sample", "block")


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch) & 0xFFFFFFFF, 0x7E1])


def compact_index_dtype(count: int) -> np.dtype:
    """The smallest of int32 and int64 that holds every index ``0 .. count - 1`` (int32 below 2**31)."""
    return np.dtype(np.int32) if count <= np.iinfo(np.int32).max else np.dtype(np.int64)


def epoch_order(sample_block: np.ndarray, *, seed: int, epoch: int, shuffle: str = "sample",
                window_blocks: int = 8, dtype: np.dtype | type = np.int64) -> np.ndarray:
    """The global sample order of one epoch.

    Args:
        sample_block: int array (num_samples,): block index of each sample.
        seed: Shuffle seed (same on every rank).
        epoch: Epoch number.
        shuffle: ``"sample"``, ``"block"`` or ``"none"``.
        window_blocks: Blocks per shuffle window in ``"block"`` mode (>= 1).
        dtype: Of the returned order: int64, or int32 (:func:`compact_index_dtype`) to halve it;
            the order is the same either way (the shuffles draw the same numbers).

    Returns:
        int array of ``dtype`` (num_samples,): a permutation of ``range(num_samples)``.

    Raises:
        ValueError: Unknown shuffle mode, ``window_blocks < 1``, or a ``dtype`` that cannot index
            ``num_samples`` samples.
    """
    count = int(sample_block.shape[0])
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or (count and count - 1 > np.iinfo(dtype).max):
        raise ValueError(f"dtype={dtype} for {count} samples; use int64, or int32 below 2**31 samples")
    if shuffle == "none":
        return np.arange(count, dtype=dtype)
    if shuffle == "sample":
        # Generator.permutation(n) is arange(n) shuffled in place: the same draws in the asked
        # dtype, with no int64 copy of the order on the way.
        order = np.arange(count, dtype=dtype)
        _rng(seed, epoch).shuffle(order)
        return order
    if shuffle != "block":
        raise ValueError(f"shuffle={shuffle!r}; choose one of {', '.join(SHUFFLE_MODES)}")
    if window_blocks < 1:
        raise ValueError(f"window_blocks={window_blocks}; it must be >= 1")
    rng = _rng(seed, epoch)
    # A manifest's samples are usually grouped by block already (one sample per object, packs
    # of neighbours): then block b's samples are bounds[b]:bounds[b + 1] and need no argsort.
    grouped = count < 2 or bool(np.all(sample_block[1:] >= sample_block[:-1]))
    by_block = None if grouped else np.argsort(sample_block, kind="stable")
    bounds = np.searchsorted(sample_block if grouped else sample_block[by_block],
                             np.arange(int(sample_block.max(initial=-1)) + 2))
    block_perm = rng.permutation(len(bounds) - 1)
    # Windows are written into one preallocated array and shuffled in place (the same draws as
    # rng.permutation of each window): a DataLoader worker computes this order every epoch, and
    # a list of small pieces concatenated would leave its heap fragmented by the order's size.
    order = np.empty(count, dtype=dtype)
    filled = 0
    for start in range(0, len(block_perm), window_blocks):
        window_start = filled
        for block in block_perm[start:start + window_blocks].tolist():
            lo, hi = int(bounds[block]), int(bounds[block + 1])
            if by_block is None:
                order[filled:filled + hi - lo] = np.arange(lo, hi, dtype=dtype)
            else:
                order[filled:filled + hi - lo] = by_block[lo:hi]
            filled += hi - lo
        rng.shuffle(order[window_start:filled])
    return order


def samples_per_rank(num_samples: int, world_size: int, drop_last: bool) -> int:
    """How many samples each rank yields per epoch."""
    if drop_last:
        return num_samples // world_size
    return -(-num_samples // world_size)


def rank_slice(order: np.ndarray, *, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """The contiguous part of the epoch order that belongs to ``rank``.

    Raises:
        ValueError: ``rank`` is not in ``[0, world_size)``.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank}, world_size={world_size}; need 0 <= rank < world_size")
    per_rank = samples_per_rank(len(order), world_size, drop_last)
    total = per_rank * world_size
    if total > len(order) and len(order):
        repeats = -(-total // len(order))
        order = np.tile(order, repeats)[:total]
    return order[rank * per_rank:(rank + 1) * per_rank]


def worker_positions(count: int, *, worker_id: int, num_workers: int, chunk: int) -> np.ndarray:
    """Positions in a rank's slice (of length ``count``) that DataLoader worker ``worker_id`` yields.

    Returns:
        int32 (int64 from 2**31 positions) (positions,), increasing.

    Raises:
        ValueError: Bad worker id or chunk size.
    """
    if num_workers < 1 or not 0 <= worker_id < num_workers:
        raise ValueError(f"worker_id={worker_id}, num_workers={num_workers}")
    if chunk < 1:
        raise ValueError(f"chunk={chunk}; it must be >= 1")
    # Held for a whole epoch by each reader: int32 below 2**31 positions, and built without a
    # (chunks, chunk) temporary and its mask when one worker takes every position.
    dtype = compact_index_dtype(count + chunk)  # a chunk's last position may pass count before the cut
    if num_workers == 1:
        return np.arange(count, dtype=dtype)
    starts = np.arange(worker_id * chunk, count, num_workers * chunk, dtype=dtype)
    if not len(starts):
        return np.zeros(0, dtype=dtype)
    positions = (starts[:, None] + np.arange(chunk, dtype=dtype)[None, :]).ravel()
    return positions[positions < count] if int(positions[-1]) >= count else positions


class WorkerPositions(Sequence[int]):
    """The positions of :func:`worker_positions`, computed when indexed instead of held.

    A reader holds its positions for a whole epoch, in every DataLoader worker of every rank: at a
    million samples an array of them is 4 MB per worker. Worker ``w`` of ``W`` takes chunks
    ``w, w + W, w + 2W, ...`` of ``chunk`` positions, so its ``i``-th position is arithmetic.

    Args:
        count: Length of the rank's slice (positions ``0 .. count - 1``).
        worker_id, num_workers: This DataLoader worker and how many the rank has.
        chunk: Positions per chunk (the batch size).

    Raises:
        ValueError: Bad worker id or chunk size (at construction).
    """

    def __init__(self, count: int, *, worker_id: int, num_workers: int, chunk: int) -> None:
        if num_workers < 1 or not 0 <= worker_id < num_workers:
            raise ValueError(f"worker_id={worker_id}, num_workers={num_workers}")
        if chunk < 1:
            raise ValueError(f"chunk={chunk}; it must be >= 1")
        self._offset, self._stride, self._chunk = worker_id * chunk, num_workers * chunk, chunk
        rounds, rest = divmod(max(count, 0), self._stride)
        self._len = rounds * chunk + min(max(rest - self._offset, 0), chunk)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        at = index + self._len if index < 0 else index
        if not 0 <= at < self._len:
            raise IndexError(f"position index {index} outside 0..{self._len - 1}")
        rounds, within = divmod(at, self._chunk)
        return rounds * self._stride + self._offset + within


def resolve_shuffle(shuffle: str, num_samples: int, num_blocks: int) -> str:
    """``"auto"`` resolved: per sample when every block holds one sample, else block-aware."""
    if shuffle != "auto":
        return shuffle
    return "sample" if num_samples == num_blocks else "block"


def reuse_gap(sample_block: np.ndarray, window_blocks: int) -> int:
    """How far apart (in positions) two reads of one block may be and still be one block access.

    With one sample per block, only consecutive reads share an access; with several, a block's
    samples are spread over its shuffle window of ``window_blocks`` blocks (see
    :func:`tierload.node.stream.plan_runs`).
    """
    most = int(np.bincount(sample_block).max(initial=1)) if len(sample_block) else 1
    return 1 if most <= 1 else int(window_blocks * most)



# Sample ids gathered at once by block_sequence (bounds its transient index copy to 512 KiB).
_GATHER_WINDOW = 65536


def block_sequence(sample_block: np.ndarray, *orders: np.ndarray) -> np.ndarray:
    """The block of each position of ``orders`` laid end to end, as one int32 array (a stream plan's ``seq``).

    Gathered straight into the result: no temporary per order, no concatenation, no cast (each
    would copy the plan again: megabytes at a million samples, at the start-up's peak).

    Args:
        sample_block: int array (num_samples,): block index of each sample (< 2**31 blocks).
        orders: int arrays of sample ids (any int dtype).

    Returns:
        int32 (sum of the orders' lengths,).

    Raises:
        ValueError: A block index does not fit int32.
        IndexError: A sample id is outside ``sample_block``.
    """
    wide = sample_block.dtype != np.int32
    if wide and len(sample_block) and int(sample_block.max(initial=0)) > np.iinfo(np.int32).max:
        raise ValueError(f"block index {int(sample_block.max())} does not fit a stream plan's int32 sequence")
    seq = np.empty(sum(len(order) for order in orders), np.int32)
    at = 0
    for order in orders:
        part = seq[at:at + len(order)]
        if len(order) and not 0 <= int(order.min()) <= int(order.max()) < len(sample_block):
            raise IndexError(f"sample ids {int(order.min())}..{int(order.max())} outside 0..{len(sample_block) - 1}")
        # A window at a time: take converts int32 ids to intp (8 bytes each) first, and its default
        # mode buffers `out` in a temporary copy (mode="clip": the bounds were checked above).
        for lo in range(0, len(order), _GATHER_WINDOW):
            window = order[lo:lo + _GATHER_WINDOW]
            if wide:
                part[lo:lo + len(window)] = sample_block[window]
            else:
                np.take(sample_block, window, out=part[lo:lo + len(window)], mode="clip")
        at += len(order)
    return seq
