"""Next-use distances from the plans a node cache holds, for the clairvoyant policy."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Hashable, Sequence

import numpy as np

from tierload.cache.stream import Stream
from tierload.runs import NEVER


class PlanOracle:
    """How many accesses until each block is next needed, by any open stream (or the look-ahead
    of a closed one) on this node.

    Vectorised per dataset: the keys are grouped by the dataset that owns them, and each of
    that dataset's streams answers for all of them with one numpy expression.

    Args:
        key_owners: ``{block key: [(dataset_id, block index), ...]}`` (read live).
        streams_by_dataset: ``{dataset_id: [Stream, ...]}`` (read live).
    """

    def __init__(self, key_owners: dict[Any, list[tuple[str, int]]],
                 streams_by_dataset: dict[str, list[Stream]]) -> None:
        self.key_owners = key_owners
        self.streams_by_dataset = streams_by_dataset

    def distances(self, keys: Sequence[Hashable]) -> np.ndarray:
        """int64 array: accesses until each key's next use (``NEVER`` if no plan needs it)."""
        out = np.full(len(keys), NEVER, dtype=np.int64)
        positions: dict[str, list[int]] = defaultdict(list)
        indices: dict[str, list[int]] = defaultdict(list)
        for i, key in enumerate(keys):
            for dataset_id, block_index in self.key_owners.get(key, ()):
                positions[dataset_id].append(i)
                indices[dataset_id].append(block_index)
        for dataset_id, where in positions.items():
            streams = self.streams_by_dataset.get(dataset_id)
            if not streams:
                continue
            blocks = np.asarray(indices[dataset_id], dtype=np.int64)
            best = np.full(len(blocks), NEVER, dtype=np.int64)
            for stream in streams:
                nxt = stream.next_use[blocks]
                best = np.minimum(best, np.where(nxt == NEVER, NEVER, nxt - stream.next_run))
            rows = np.asarray(where, dtype=np.int64)
            out[rows] = np.minimum(out[rows], best)
        return out
