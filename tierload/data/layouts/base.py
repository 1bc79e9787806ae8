"""What a dataset layout provides: blocks and samples from a listing, and a block decoder."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from tierload.data.blocks import Block
from tierload.data.member_spans import MemberSpans


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

    @classmethod
    def of_counts(cls, blocks: list[Block], counts: Sequence[int], *, extra: dict[str, Any] | None = None,
                  skipped: dict[str, str] | None = None) -> "LayoutPlan":
        """The plan of ``blocks`` holding ``counts[i]`` samples each, in order, labels in the data (-1).

        Args:
            blocks: Every block, in a stable order.
            counts: Samples per block (same length as ``blocks``).
            extra, skipped: As the attributes.
        """
        count_array = np.asarray(counts, dtype=np.int64)
        starts = np.cumsum(count_array) - count_array
        total = int(count_array.sum())
        return cls(blocks=blocks,
                   sample_block=np.repeat(np.arange(len(blocks), dtype=np.int32), count_array),
                   sample_index=(np.arange(total, dtype=np.int64) - np.repeat(starts, count_array)).astype(np.int32),
                   labels=np.full(total, -1, dtype=np.int64), extra=extra or {}, skipped=skipped or {})


class BlockDecoder(Protocol):
    """Turns a block's bytes into its samples. Must pickle cleanly (it travels to workers)."""

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        """Return the block's samples as ``(sample, label)`` pairs, indexable by position."""


class ManifestView(Protocol):
    """What a layout's decoder factory or projector reads of a dataset's manifest
    (:class:`tierload.data.manifest.Manifest` is one): handed this view, a layout never imports
    the manifest module, which imports the layouts to plan and decode."""

    @property
    def url(self) -> str:
        """The dataset's prefix URL in the cold tier."""
        ...

    @property
    def blocks(self) -> Sequence[Block]:
        """Every block, in the manifest's order."""
        ...

    @property
    def labels(self) -> np.ndarray:
        """int64 (num_samples,): class index, or -1 where the label comes with the data."""
        ...

    @property
    def extra(self) -> dict[str, Any]:
        """Layout-specific data (footers, schemas, offsets)."""
        ...

    @property
    def pack_index(self) -> MemberSpans:
        """Where each packed sample lies in its pack."""
        ...
