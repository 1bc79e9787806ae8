"""Next uses along a trace: numpy-precomputed, and served to the clairvoyant policy."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tierload.data.runs import NEVER, next_run_of_same_block


def next_use(block: np.ndarray, node: np.ndarray | None = None) -> np.ndarray:
    """For every access, the position of the next access of the same block by the same node.

    Args:
        block: int array (accesses,): block of each access.
        node: int array (accesses,): node of each access (None: one node). Each node's hot
            tier sees only its own accesses, so next uses are per node.

    Returns:
        int64 array (accesses,): trace position of the next use, ``NEVER`` if there is none.
    """
    block = np.asarray(block, dtype=np.int64)
    if node is None or not len(node) or int(node.max()) == 0:
        return next_run_of_same_block(block)
    return next_run_of_same_block(block * (int(node.max()) + 1) + np.asarray(node, dtype=np.int64))


class TraceOracle:
    """Next uses of blocks as one node walks its trace: a positional oracle for ClairvoyantPolicy.

    At every access, before the tier hears of it, the accessed block's next use moves on
    (:meth:`advance`) and every other block's stays put, which is what lets
    :class:`tierload.policies.clairvoyant.ClairvoyantPolicy` keep a heap. The simulator's loop
    writes :attr:`next_at` itself, without the call; in heap mode only next uses are read,
    never :attr:`position` (which :meth:`distances` needs, and only :meth:`advance` keeps).

    Args:
        num_blocks: Blocks in the trace (keys are block indices ``0 .. num_blocks - 1``).
    """

    def __init__(self, num_blocks: int) -> None:
        # A list, not an array: the simulator writes one element per access, and list item
        # assignment of Python ints is several times cheaper than numpy scalar assignment.
        self.next_at: list[int] = [NEVER] * num_blocks
        self.position = 0
        # next_use as the list's own item getter: the clairvoyant policy calls it for every
        # access of a resident, and a C-level call costs a fraction of a Python method's.
        self.next_use = self.next_at.__getitem__  # type: ignore[method-assign, assignment]

    def advance(self, position: int, block: int, next_position: int) -> None:
        """The trace is at ``position``, an access of ``block`` next needed at ``next_position``."""
        self.position = position
        self.next_at[block] = next_position

    def next_use(self, key: int) -> int:  # replaced per instance in __init__, same result
        """Absolute trace position of the next use of ``key`` (``NEVER`` if none)."""
        return self.next_at[key]

    def distances(self, keys: Sequence[int]) -> np.ndarray:
        """Accesses from now until the next use of each key (``NEVER`` if none)."""
        at = np.array([self.next_at[key] for key in keys], dtype=np.int64)
        return np.where(at == NEVER, NEVER, at - self.position)
