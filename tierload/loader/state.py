"""Mid-epoch resumption: what a :class:`~tierload.loader.dataset.TieredDataset` state holds, and how it resumes.

A state is a plain dict (JSON- and ``torch.save``-able)::

    {"format": "tierload.TieredDataset", "version": 2,
     "dataset_id": ..., "num_samples": <samples of this rank in this segment of the epoch>,
     "dataset_samples": <samples of the epoch's global order>,
     "chain": [[world_size, consumed per rank], ...]  (earlier segments of the epoch, oldest first),
     "epoch": 3, "seed": 0, "shuffle": "block", "window_blocks": 8,
     "rank": 0, "world_size": 2, "drop_last": False, "batch_size": 64,
     "start": <rank-order position where the iteration that produced this state began>,
     "position": <every rank-order position before this one was consumed>,
     "worker": None | {"id": w, "num_workers": W, "yielded": n}}

Positions index the rank's order of the epoch's current segment: the rank's slice
(:func:`tierload.data.order.rank_slice`) of what the chain left (:mod:`tierload.data.elastic`).

Any rank's state resumes the whole job: ranks step in lockstep, so every rank has consumed the
same number of samples of its own slice. At the same world size the state resumes as saved (any
rank may load it). At another world size (:func:`rebased`) the saved segment joins the chain, and
the new ranks split what is left afresh; that needs a rank-level state (the whole loader's).

Two ways to resume, both exact:

* **Rank-level** (``worker`` is None): the rest of the epoch is ``order[position:]``, split
  afresh over however many DataLoader workers the new loader has. Produced by
  ``dataset.state_dict()`` when the dataset is iterated in the main process
  (``num_workers=0``), by ``dataset.state_dict(batches_consumed=k)``, or by passing a whole
  torchdata ``StatefulDataLoader.state_dict()`` to ``dataset.load_state_dict`` (the worker
  states are merged: the DataLoader yields batches in order, so the furthest chunk any worker
  delivered ends the consumed prefix).
* **Per-worker** (``worker`` set): what torchdata's ``StatefulDataLoader`` keeps for each
  worker and hands back to the same worker on ``loader.load_state_dict``. The worker continues
  its own list of chunks after the ``n`` samples it had yielded; torchdata restores the order
  in which it polls the workers, so the loader's output continues exactly. This needs the same
  ``num_workers`` (torchdata's own rule); to change it, resume rank-level as above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tierload.data.elastic import Segment, as_chain, segment_rank_count
from tierload.errors import ConfigError

STATE_FORMAT = "tierload.TieredDataset"
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: no chain, no dataset_samples
# Settings that decide the epoch's order: a state only resumes under the same ones.
ORDER_KEYS = ("shuffle", "window_blocks", "drop_last")


@dataclass
class ResumePoint:
    """Where the next iteration of one epoch starts.

    Attributes:
        epoch: The epoch the point belongs to (an iteration of another epoch ignores it).
        start: Rank-order positions before this were consumed before the restart.
        skip: Samples this worker had yielded after ``start`` (per-worker resume; else 0).
        worker: ``(id, num_workers)`` the skip refers to, or None for a rank-level point.
        lower_bound: Positions (relative to ``start``) that every worker has passed: the node
            cache plans from there.
        gen: Generation in the dataset's shared block, 0 for a point local to this process.
    """

    epoch: int
    start: int
    skip: int = 0
    worker: tuple[int, int] | None = None
    lower_bound: int = 0
    gen: int = 0


def chunks_passed(yielded: int, worker: int, num_workers: int, chunk: int) -> int:
    """Positions (relative to the iteration's start) before the end of the last chunk a worker yielded.

    Worker ``w`` of ``W`` takes chunks ``w, w+W, ...`` (see :func:`tierload.data.order.worker_positions`),
    so after ``n`` samples its last chunk is number ``w + (ceil(n / chunk) - 1) * W``.
    """
    if yielded <= 0:
        return 0
    last_chunk = worker + (-(-yielded // chunk) - 1) * num_workers
    return (last_chunk + 1) * chunk


def is_loader_state(state: Mapping[str, Any]) -> bool:
    """Whether ``state`` is a torchdata ``StatefulDataLoader.state_dict()`` (multi- or single-process)."""
    return "_snapshot" in state or ("dataset_state" in state and "_num_yielded" in state)


def from_loader_state(state: Mapping[str, Any], batch_size: int | None) -> dict[str, Any]:
    """Merge a ``StatefulDataLoader`` state into one rank-level TieredDataset state.

    Args:
        state: ``loader.state_dict()`` of a torchdata ``StatefulDataLoader`` over a TieredDataset.
        batch_size: The dataset's batch size (needed only when the loader snapshots every
            n > 1 steps: the steps since the last snapshot are full batches).

    Raises:
        ConfigError: The loader state holds no TieredDataset state.
    """
    if "_snapshot" in state:
        snapshot = state["_snapshot"]
        workers = [w.get("dataset_state") for w in snapshot.get("_worker_snapshots", {}).values()]
        steps = int(state.get("_steps_since_snapshot", 0) or 0)
    else:
        workers, steps = [state.get("dataset_state")], 0
    workers = [w for w in workers if isinstance(w, Mapping) and w.get("format") == STATE_FORMAT]
    if not workers:
        raise ConfigError("the DataLoader state holds no TieredDataset state (was the loader built over a "
                          "TieredDataset, and did it start iterating?)")
    merged = dict(workers[0])
    position = max(int(w["position"]) for w in workers)
    if steps:
        if not batch_size:
            raise ConfigError("the loader state was taken between snapshots (snapshot_every_n_steps > 1); "
                              "give TieredDataset(batch_size=...) so the steps since can be counted")
        position += steps * batch_size
    merged["position"] = min(position, int(merged["num_samples"]))
    merged["worker"] = None
    return merged


def check_state(state: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Raise ConfigError unless ``state`` is a TieredDataset state that resumes under ``expected``.

    Args:
        state: A state from :meth:`TieredDataset.state_dict`.
        expected: This dataset's ``dataset_id``, ``dataset_samples`` and :data:`ORDER_KEYS` values.
            The state's own ``world_size`` and chain must account for its ``num_samples``; its
            rank and world size may differ from the loader's (any rank's state resumes the job).
    """
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        raise ConfigError("not a TieredDataset state: expected the dict returned by TieredDataset.state_dict() "
                          "or a torchdata StatefulDataLoader.state_dict()")
    if state.get("version") not in READABLE_VERSIONS:
        raise ConfigError(f"TieredDataset state version {state.get('version')!r}; this tierload reads "
                          f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    if state["dataset_id"] != expected["dataset_id"]:
        raise ConfigError("the state was saved for different dataset contents (the manifest changed since); "
                          "its positions do not apply to this dataset")
    for key in ORDER_KEYS:
        if state[key] != expected[key]:
            raise ConfigError(f"the state was saved with {key}={state[key]!r}, this dataset has "
                              f"{key}={expected[key]!r}; resume with the same setting")
    total = int(state.get("dataset_samples", expected["dataset_samples"]))
    if total != int(expected["dataset_samples"]):
        raise ConfigError(f"the state covers {total} samples per epoch, this dataset {expected['dataset_samples']}")
    world = int(state["world_size"])
    chain = as_chain(state.get("chain", ()))
    per_rank = segment_rank_count(total, chain, world, bool(state["drop_last"]))
    if int(state["num_samples"]) != per_rank:
        raise ConfigError(f"the state covers {state['num_samples']} samples per rank; its chain {state.get('chain')} "
                          f"at world_size={world} leaves {per_rank}")
    if not 0 <= int(state["start"]) <= int(state["position"]) <= int(state["num_samples"]):
        raise ConfigError(f"inconsistent state: start={state['start']}, position={state['position']}, "
                          f"num_samples={state['num_samples']}")


def state_chain(state: Mapping[str, Any]) -> tuple[Segment, ...]:
    """The earlier segments of a checked state's epoch (none in a version-1 state)."""
    return as_chain(state.get("chain", ()))


def rebased(state: Mapping[str, Any], rank: int, world_size: int, dataset_samples: int) -> dict[str, Any]:
    """A checked rank-level state taken at another world size, as a state of ``rank`` of ``world_size``.

    The saved segment (its world size, the samples each rank consumed) joins the chain; the new
    segment starts at its beginning (see :mod:`tierload.data.elastic`).

    Args:
        state: A state that :func:`check_state` accepted, with ``world_size`` other than ``world_size``.
        rank, world_size: The loading rank and the new world size.
        dataset_samples: Samples of the epoch's global order (the dataset's).

    Returns:
        A state of the new segment at position 0 (``num_samples`` the new per-rank count).

    Raises:
        ConfigError: ``state`` is one DataLoader worker's state (its rank position is unknown).
    """
    if state.get("worker") is not None:
        raise ConfigError(f"one DataLoader worker's state (world_size={state['world_size']}) cannot resume at "
                          f"world_size={world_size}: load the whole StatefulDataLoader.state_dict() into the "
                          "dataset (dataset.load_state_dict(loader_state)) before building the new loader")
    chain = [*state_chain(state), Segment(int(state["world_size"]), int(state["position"]))]
    per_rank = segment_rank_count(dataset_samples, chain, world_size, bool(state["drop_last"]))
    return {**state, "version": STATE_VERSION, "chain": [[s.world_size, s.consumed] for s in chain],
            "dataset_samples": dataset_samples, "rank": rank, "world_size": world_size, "num_samples": per_rank,
            "start": 0, "position": 0}
