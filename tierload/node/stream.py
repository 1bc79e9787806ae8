"""A stream: the planned block accesses of one rank in one epoch, and its consumers' progress.

Pure bookkeeping (numpy, no I/O), used by the node cache to prefetch ahead of the training
loop and to tell the clairvoyant policy how far ahead each block is needed.

A *run* is one access of a block (see :mod:`tierload.data.runs`).
"""

from __future__ import annotations

import heapq

import numpy as np

from tierload.data.runs import NEVER, next_run_of_same_block, plan_runs


class Stream:
    """Planned accesses of one (dataset, epoch, rank) and the progress of its consumers.

    Args:
        stream_id: Unique name.
        dataset_id: The dataset the block indices refer to.
        epoch: Epoch number.
        seq: int array: block index at each position of the rank's order; positions at and
            beyond ``consume_len`` are a look-ahead into the next epoch (prefetched, not counted).
        consume_len: Number of positions the consumers will actually read.
        num_consumers: DataLoader workers of the rank (their cursors are tracked separately).
        num_blocks: Blocks in the dataset.
        reuse_gap: See :func:`tierload.data.runs.plan_runs`.
        start: Positions before this were consumed before a restart (a resumed epoch): they are
            never prefetched or counted, and consumers not heard from yet count as being there.
    """

    def __init__(self, stream_id: str, dataset_id: str, epoch: int, seq: np.ndarray, consume_len: int,
                 num_consumers: int, num_blocks: int, reuse_gap: int = 1, start: int = 0) -> None:
        self.stream_id = stream_id
        self.dataset_id = dataset_id
        self.epoch = epoch
        self.consume_len = consume_len
        self.num_consumers = num_consumers
        self.run_start, self.run_block, self.run_last, self.pos_run = plan_runs(np.asarray(seq), reuse_gap)
        self.nxt = next_run_of_same_block(self.run_block)
        self.num_runs = len(self.run_start)
        self.consume_runs = int(np.searchsorted(self.run_start, consume_len))
        self.start = min(max(int(start), 0), consume_len)
        self.next_run = int(self.pos_run[self.start]) if self.start < consume_len else self.consume_runs
        # next_use[b]: first run of block b at or after the prefetch frontier.
        self.next_use = np.full(num_blocks, NEVER, dtype=np.int64)
        blocks, first_run = np.unique(self.run_block[self.next_run:], return_index=True)
        self.next_use[blocks] = first_run + self.next_run
        self.cursors: dict[int, int] = {}
        self.done: set[int] = set()
        self.scheduled: list[tuple[int, int]] = []  # heap of (run_last, run) not yet passed
        self.window_bytes = 0
        self.stats: dict[str, int] = {}  # the node cache's counters of this stream (cache/stats.py)
        self.lineage = stream_id  # same for every epoch of one (dataset, seed, rank, world size)
        self.identity = ""  # the job it serves (tierload.stores.cold.identity): joins and acquires must match
        self.readers: dict[str, str] = {}  # dataset id -> identity whose source reads its blocks from cold

    @property
    def cursor(self) -> int:
        """Smallest position any consumer has not consumed yet (unregistered consumers count as ``start``)."""
        if len(self.done) >= self.num_consumers:
            return self.consume_len
        values = [self.cursors.get(c, self.start) for c in range(self.num_consumers) if c not in self.done]
        return min(values) if values else self.consume_len

    @property
    def finished(self) -> bool:
        return len(self.done) >= self.num_consumers

    def lead(self) -> tuple[int, int]:
        """How far prefetching is ahead of the slowest consumer: ``(runs, positions)`` scheduled
        beyond the cursor (0 when the consumers caught up or the epoch is done)."""
        cursor = self.cursor
        if cursor >= self.consume_len:
            return 0, 0
        frontier = int(self.run_start[self.next_run]) if self.next_run < self.num_runs else len(self.pos_run)
        return max(0, self.next_run - self.run_of(cursor)), max(0, min(frontier, self.consume_len) - cursor)

    def counted(self, run: int) -> bool:
        """Whether ``run`` is a real access of this epoch (not look-ahead into the next)."""
        return run < self.consume_runs

    def mark_scheduled(self, run: int) -> None:
        """Advance the frontier past ``run`` and record the block's next later use."""
        heapq.heappush(self.scheduled, (int(self.run_last[run]), run))
        self.next_use[self.run_block[run]] = self.nxt[run]
        self.next_run = run + 1

    def skip_to(self, run: int) -> list[int]:
        """Consumers read runs up to ``run`` straight from the hot tier: move the frontier there.

        Returns the skipped run indices (they were hot hits nobody scheduled).
        """
        skipped = list(range(self.next_run, run))
        if skipped:
            blocks = self.run_block[self.next_run:run]
            self.next_use[blocks] = self.nxt[self.next_run:run]  # ascending: the last write wins
            self.next_run = run
        return skipped

    def set_cursor(self, consumer: int, position: int) -> list[int]:
        """Record that ``consumer`` has consumed every position before ``position``.

        Returns:
            Scheduled runs that every consumer has now passed (to unpin), in no fixed order.
        """
        if position >= self.consume_len:
            self.done.add(consumer)
        self.cursors[consumer] = max(position, self.cursors.get(consumer, 0))
        cursor = self.cursor
        passed = []
        while self.scheduled and self.scheduled[0][0] < cursor:
            passed.append(heapq.heappop(self.scheduled)[1])
        return passed

    def drain(self) -> list[int]:
        """Every run still scheduled (the stream is closing)."""
        runs = [run for _, run in self.scheduled]
        self.scheduled = []
        return runs

    def run_of(self, position: int) -> int:
        """The run that serves ``position``."""
        return int(self.pos_run[position])

    def distance(self, block: int) -> int:
        """Runs between the prefetch frontier and the next planned use of ``block``."""
        nxt = int(self.next_use[block])
        return NEVER if nxt == NEVER else nxt - self.next_run
