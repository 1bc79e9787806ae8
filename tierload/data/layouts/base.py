"""What a dataset layout provides: blocks and samples from a listing, and a block decoder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from tierload.data.blocks import Block


@dataclass
class LayoutPlan:
    """Blocks and samples of a dataset, as a layout derives them from the listing.

    Attributes:
        blocks: Every block, in a stable order.
        sample_block: int32 array (num_samples,): block index of each sample.
        sample_index: int32 array (num_samples,): position of the sample inside its block.
        labels: int64 array (num_samples,): class index, or -1 where the label is in the data.
        classes: Class names, indexed by label.
        extra: Layout-specific data the decoder needs (JSON-serialisable).
        skipped: ``{object url: reason}`` for objects that are not samples.
    """

    blocks: list[Block]
    sample_block: np.ndarray
    sample_index: np.ndarray
    labels: np.ndarray
    classes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


class BlockDecoder(Protocol):
    """Turns a block's bytes into its samples. Must pickle cleanly (it travels to workers)."""

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        """Return the block's samples as ``(sample, label)`` pairs, indexable by position."""
