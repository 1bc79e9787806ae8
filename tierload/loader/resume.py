"""Where a TieredDataset is in its epoch, shared with its DataLoader workers, and how it resumes.

The epoch and a pending resume point live in a small shared-memory block, so DataLoader workers
see ``set_epoch`` even with ``persistent_workers=True``, and a resume point is used by exactly
one iteration (all of its workers), then never again. What a saved state holds is described in
:mod:`tierload.loader.state`.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import xxhash

from tierload.errors import ConfigError
from tierload.loader.state import ResumePoint, chunks_passed

log = logging.getLogger(__name__)

# Slots of the shared int64 block.
_EPOCH, _RESUME_GEN, _CLAIMED_GEN, _CLAIM_KEY, _LAST_EPOCH, _LAST_IN_WORKER, _LAST_KEY = range(7)


@dataclass
class Progress:
    """How far this process's current iteration got (for :meth:`ResumeTracker.state_dict`)."""

    pid: int
    epoch: int
    start: int
    positions: Sequence[int]
    chunk: int
    worker: int
    num_workers: int
    in_worker: bool
    yielded: int = 0


class ResumeTracker:
    """The epoch, a pending resume point and this process's progress, for one dataset."""

    def __init__(self) -> None:
        self.shared = torch.zeros(7, dtype=torch.int64).share_memory_()
        self.shared[_LAST_EPOCH] = -1
        self.point: ResumePoint | None = None
        self.progress: Progress | None = None
        self.iterations = 0

    def __getstate__(self):
        state = self.__dict__.copy()
        state["progress"] = None  # a worker's progress is its own
        return state

    @property
    def epoch(self) -> int:
        return int(self.shared[_EPOCH])

    def set_epoch(self, epoch: int) -> None:
        self.shared[_EPOCH] = int(epoch)

    def begin(self, info, epoch: int) -> tuple[int, ResumePoint | None]:
        """Start an iteration: its unique key (for the stream id) and the resume point it takes.

        Workers of one DataLoader iteration share ``base_seed = seed - id`` (a fresh iteration
        gets a new one); the parent's pid keeps two processes restored from one state apart.
        """
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        self.iterations += 1
        base = (info.seed - info.id, os.getppid()) if info is not None else (random.getrandbits(48), os.getpid())
        key = xxhash.xxh3_64_intdigest(f"{base}/{self.iterations}".encode()) & ((1 << 62) - 1)
        shared = self.shared
        shared[_LAST_EPOCH], shared[_LAST_IN_WORKER], shared[_LAST_KEY] = epoch, int(info is not None), key
        return key, self._take(epoch, key, worker, workers)

    def track(self, progress: Progress) -> Progress:
        self.progress = progress
        return progress

    def _take(self, epoch: int, key: int, worker: int, workers: int) -> ResumePoint | None:
        """The resume point this iteration starts from, if any; each point serves one iteration."""
        point = self.point
        if point is None:
            return None
        if point.epoch != epoch:
            self.point = None
            return None
        if point.gen == 0:  # loaded in this very process (a worker, by torchdata): one-shot
            self.point = None
            if point.worker is not None and point.worker != (worker, workers):
                log.warning("a resume point for worker %s was loaded into worker %s; ignored", point.worker,
                            (worker, workers))
                return None
            return point
        shared = self.shared
        if int(shared[_RESUME_GEN]) != point.gen:
            self.point = None  # superseded by a later load_state_dict
            return None
        if int(shared[_CLAIMED_GEN]) != point.gen:
            shared[_CLAIM_KEY] = key
            shared[_CLAIMED_GEN] = point.gen
            return point
        if int(shared[_CLAIM_KEY]) == key:
            return point  # another worker of this same iteration claimed it first
        self.point = None  # an earlier iteration used it
        return None

    def _pending_start(self, epoch: int) -> int:
        """Where the current (or next) iteration of ``epoch`` in the main process starts."""
        point = self.point
        if point is None or point.epoch != epoch or point.worker is not None:
            return 0
        shared = self.shared
        if point.gen and int(shared[_CLAIMED_GEN]) == point.gen and int(shared[_CLAIM_KEY]) != int(shared[_LAST_KEY]):
            return 0  # an earlier iteration used it; the last one started from the epoch's beginning
        return point.start

    def state_dict(self, base: dict[str, Any], info, batch_size: int | None,
                   batches_consumed: int | None) -> dict[str, Any]:
        """See :meth:`tierload.loader.dataset.TieredDataset.state_dict`."""
        total = base["num_samples"]
        epoch = self.epoch
        progress = self.progress
        if progress is not None and (progress.pid != os.getpid() or progress.epoch != epoch):
            progress = None
        if batches_consumed is not None:
            if not batch_size:
                raise ConfigError("state_dict(batches_consumed=...) needs TieredDataset(batch_size=...)")
            start = progress.start if progress is not None else self._pending_start(epoch)
            position = min(total, start + int(batches_consumed) * batch_size)
            return {**base, "epoch": epoch, "start": start, "position": position, "worker": None}
        if info is not None:
            if progress is not None:
                start, yielded = progress.start, progress.yielded
            else:
                point = self.point if self.point is not None and self.point.epoch == epoch else None
                start = point.start if point is not None else 0
                yielded = point.skip if point is not None and point.worker is not None else 0
            position = min(total, start + chunks_passed(yielded, info.id, info.num_workers, batch_size or 1))
            return {**base, "epoch": epoch, "start": start, "position": position,
                    "worker": {"id": info.id, "num_workers": info.num_workers, "yielded": yielded}}
        if progress is not None and not progress.in_worker:
            end = int(progress.positions[progress.yielded - 1]) + 1 if progress.yielded else 0
            return {**base, "epoch": epoch, "start": progress.start, "position": progress.start + end,
                    "worker": None}
        shared = self.shared
        if int(shared[_LAST_EPOCH]) == epoch and int(shared[_LAST_IN_WORKER]):
            raise ConfigError("DataLoader workers iterated this epoch and the main process cannot see which of "
                              "their prefetched batches the loop consumed: call state_dict(batches_consumed=k), "
                              "or use torchdata's StatefulDataLoader and save loader.state_dict()")
        start = self._pending_start(epoch)
        return {**base, "epoch": epoch, "start": start, "position": start, "worker": None}

    def load_state_dict(self, state: Mapping[str, Any], info, batch_size: int | None) -> None:
        """Set the epoch and the resume point from a checked state (see :mod:`tierload.loader.state`)."""
        epoch = int(state["epoch"])
        self.set_epoch(epoch)
        worker = state.get("worker")
        if worker is not None:
            if info is None:
                raise ConfigError("this is one DataLoader worker's state; load the whole "
                                  "StatefulDataLoader.state_dict() (its worker states are merged)")
            if (info.id, info.num_workers) != (worker["id"], worker["num_workers"]):
                raise ConfigError(f"worker state of worker {worker['id']} of {worker['num_workers']} loaded into "
                                  f"worker {info.id} of {info.num_workers}; resume with the same num_workers, or "
                                  "load the loader's state into the dataset before building a new loader")
            if state["batch_size"] != batch_size:
                raise ConfigError(f"the state was saved with batch_size={state['batch_size']}, this dataset has "
                                  f"batch_size={batch_size}")
            yielded = int(worker["yielded"])
            bound = chunks_passed(yielded, info.id, info.num_workers, batch_size or 1)
            self.point = ResumePoint(epoch, int(state["start"]), skip=yielded, worker=(info.id, info.num_workers),
                                     lower_bound=min(bound, int(state["num_samples"]) - int(state["start"])))
        elif info is not None:
            self.point = ResumePoint(epoch, int(state["position"]))
        else:
            gen = int(self.shared[_RESUME_GEN]) + 1
            self.shared[_RESUME_GEN] = gen
            self.point = ResumePoint(epoch, int(state["position"]), gen=gen)
        self.progress = None
