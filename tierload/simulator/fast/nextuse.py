"""Next uses along a trace in one backward pass (the compiled :func:`tierload.simulator.oracle.next_use`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from tierload.simulator.fast.belady_kernel import NEVER
from tierload.simulator.fast.columns import ID_DTYPE, as_ids


@njit(cache=True)
def _next_use(block, node, num_blocks, num_nodes):
    nexts = np.empty(len(block), np.int64)
    last = np.full(num_blocks * num_nodes, NEVER, np.int64)
    for i in range(len(block) - 1, -1, -1):
        idx = node[i] * num_blocks + block[i]
        nexts[i] = last[idx]
        last[idx] = i
    return nexts


def next_use(block: np.ndarray, node: np.ndarray | None, num_blocks: int) -> np.ndarray:
    """For every access, the position of the next access of the same block by the same node.

    Args:
        block: int array (accesses,): block of each access, in ``[0, num_blocks)``.
        node: int array (accesses,): node of each access (None: one node).
        num_blocks: Blocks the indices refer to.

    Returns:
        int64 array (accesses,): trace position of the next use, ``NEVER`` if there is none
        (equal to :func:`tierload.simulator.oracle.next_use`).

    Raises:
        ConfigError: A block or node id of 2**31 or more.
    """
    block = as_ids(block, "block")  # the one dtype compiled (see .columns)
    node = np.zeros(len(block), ID_DTYPE) if node is None else as_ids(node, "node")
    num_nodes = int(node.max()) + 1 if len(node) else 1
    return _next_use(block, node, max(num_blocks, 1), num_nodes)
