"""Next-use distances from the plans a node cache holds, for the clairvoyant policy.

Sharing policy, when several jobs (or several ranks) use one node cache (issue 13):

1. **Clairvoyant over the union of every stream.** A block's distance is the soonest next use
   by any open stream (or the look-ahead of a closed one, a *ghost*), each counted in that
   stream's own accesses: a fast job's blocks do not look more urgent than a slow job's just
   because it reads faster. One copy of a block serves every stream that reads it.
2. **A minimum share per stream.** The hot tier's capacity is divided equally among the
   streams the oracle sees; a stream's next distinct blocks, in plan order, up to its share in
   bytes, are *protected*: every unprotected resident is evicted (and an unprotected newcomer
   refused) before any protected one. So one job's prefetching can never evict the blocks
   another job needs next, as long as they fit that job's share; a job whose working set fits
   its share keeps all of it, at any speed of the other jobs. A share is per stream (one
   rank's epoch), so a job with more ranks on the node holds more shares; it is counted in
   the blocks' raw bytes; a ghost holds its share until its lineage's next epoch opens.
3. **Prefetch is round-robin** (:mod:`~tierload.node.stream_table`): one block per stream per
   pass, each stream bounded by ``prefetch.depth_blocks``/``depth_bytes``, and a scheduled
   block stays pinned until its consumers pass it.

With one stream, the protected blocks are exactly the ones Belady's MIN keeps anyway, so a
single job's decisions are unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from tierload.data.runs import NEVER
from tierload.node.stream import Stream

# Added to the distance of an unprotected block: larger than any plan, far below NEVER.
UNPROTECTED_OFFSET = 2**48
_FIRST_WINDOW_RUNS = 1024
# A stream's horizon is computed again once it has moved on by this fraction of the blocks in
# its share (or its share changed); in between, eviction decisions reuse it (the share is then
# a little smaller than it could be), so a decision's cost stays small with shares of many blocks.
REFRESH_FRACTION = 1 / 16


def protected_horizon(stream: Stream, sizes: np.ndarray, share_bytes: int) -> tuple[int, int]:
    """Where a stream's share ends: its next distinct blocks in plan order, while their bytes fit
    ``share_bytes``, are the blocks whose next use by the stream comes before this run.

    Args:
        stream: An open stream or a ghost (its ``next_run`` is where its future starts).
        sizes: int64 bytes of each block of the stream's dataset, by block index.
        share_bytes: The stream's share of the hot tier.

    Returns:
        ``(horizon, blocks)``: the absolute run index (``stream.num_runs`` when the whole rest of
        the plan fits) and how many distinct blocks the share holds.
    """
    window = _FIRST_WINDOW_RUNS
    future = stream.run_block[stream.next_run:]
    while True:
        blocks, first = np.unique(future[:window], return_index=True)
        order = np.argsort(first)
        fits = int(np.count_nonzero(np.cumsum(sizes[blocks[order]]) <= share_bytes))
        if fits < len(blocks):
            return stream.next_run + int(first[order[fits]]), fits
        if window >= len(future):
            return stream.num_runs, fits
        window *= 4


class PlanOracle:
    """How many accesses until each block is next needed, by any open stream (or the look-ahead
    of a closed one) on this node, with the blocks in each stream's share ranked first.

    Vectorised per dataset: the keys are grouped by the dataset that owns them, and each of
    that dataset's streams answers for all of them with one numpy expression.

    Args:
        locate: ``locate(keys) -> {dataset_id: (rows, block indexes)}``: which of ``keys`` each
            dataset holds (:meth:`tierload.node.catalog.BlockCatalog.locate`; read live).
        streams_by_dataset: ``{dataset_id: [Stream, ...]}`` (read live).
        block_sizes: ``block_sizes(dataset_id)``: int64 bytes of each of its blocks; None: no shares.
        capacity_bytes: The hot tier's capacity, divided equally among the streams.
    """

    def __init__(self, locate: Callable[[Sequence[Any]], Mapping[str, tuple[np.ndarray, np.ndarray]]],
                 streams_by_dataset: dict[str, list[Stream]],
                 block_sizes: Callable[[str], np.ndarray] | None = None, capacity_bytes: int = 0) -> None:
        self.locate = locate
        self.streams_by_dataset = streams_by_dataset
        self.block_sizes = block_sizes
        self.capacity_bytes = capacity_bytes
        # id(stream): (stream, next_run and share when computed, horizon, blocks in the share)
        self._horizons: dict[int, tuple[Stream, int, int, int, int]] = {}

    def _horizon_of(self, stream: Stream, sizes: np.ndarray, share: int) -> int:
        cached = self._horizons.get(id(stream))
        if (cached is not None and cached[0] is stream and cached[2] == share
                and 0 <= stream.next_run - cached[1] < cached[4] * REFRESH_FRACTION):
            return cached[3]
        horizon, fits = protected_horizon(stream, sizes, share)
        if len(self._horizons) > 4 * sum(len(streams) for streams in self.streams_by_dataset.values()) + 64:
            self._horizons.clear()  # closed streams' entries
        self._horizons[id(stream)] = (stream, stream.next_run, share, horizon, fits)
        return horizon

    def share_bytes(self) -> int:
        """Each stream's protected share of the hot tier (0 with no stream or no shares)."""
        count = sum(len(streams) for streams in self.streams_by_dataset.values())
        return self.capacity_bytes // count if count and self.block_sizes is not None else 0

    def distances(self, keys: Sequence[Hashable]) -> np.ndarray:
        """int64 array: accesses until each key's next use (``NEVER`` if no plan needs it), plus
        :data:`UNPROTECTED_OFFSET` unless the key is in some stream's share."""
        out = np.full(len(keys), NEVER, dtype=np.int64)
        protected = np.zeros(len(keys), dtype=bool)
        share = self.share_bytes()
        for dataset_id, (rows, blocks) in self.locate(keys).items():
            streams = self.streams_by_dataset.get(dataset_id)
            if not streams:
                continue
            best = np.full(len(blocks), NEVER, dtype=np.int64)
            mine = np.zeros(len(blocks), dtype=bool)
            sizes = self.block_sizes(dataset_id) if share and self.block_sizes is not None else None
            for stream in streams:
                nxt = stream.next_use[blocks]
                best = np.minimum(best, np.where(nxt == NEVER, NEVER, nxt - stream.next_run))
                if sizes is not None:
                    mine |= nxt < self._horizon_of(stream, sizes, share)
            out[rows] = np.minimum(out[rows], best)
            protected[rows] |= mine
        if share:
            out = np.where(protected | (out == NEVER), out, out + UNPROTECTED_OFFSET)
        return out
