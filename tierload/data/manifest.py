"""The manifest: every block and sample of a dataset, built once by listing the cold prefix.

It is cached as an Arrow IPC file under ``manifest.cache_dir`` (keyed by URL, layout, endpoint,
block and pack sizes) and memory-mapped when read, so a second start does not list again;
``refresh=True`` (``TieredDataset(refresh_manifest=True)``) lists anew. This module is what a process that
reads a manifest needs (the value, and :func:`open_manifest`), without pyarrow; the listing and
the writer are :mod:`tierload.data.manifest_build` and :mod:`tierload.data.manifest_arrow`.
A changed object gets a new block key (the key includes the ETag), so a refreshed manifest
can never be served an old cached copy.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import xxhash

from tierload.data.block_columns import (
    BlockColumns,
    ColumnSpans,
    MemberColumns,
    block_lengths,
    digest_keys,
    pack_count,
)
from tierload.data.blocks import Block
from tierload.data.layouts.base import BlockDecoder
from tierload.data.layouts.registry import layout_spec
from tierload.data.manifest_columns import FileColumns, indexed_columns
from tierload.data.member_spans import MemberSpans, PackIndex
from tierload.errors import ManifestError

if TYPE_CHECKING:
    from tierload.config.models import ManifestConfig
    from tierload.stores.cold.source import ColdSource

# 3: pack members are rows of one member listing (member_id), not a reordered copy of it
FORMAT_VERSION = 3


def _encode_array(array: np.ndarray) -> dict[str, str]:
    return {"dtype": str(array.dtype), "data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()}


def _decode_array(blob: dict[str, str]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(blob["data"]), dtype=blob["dtype"]).copy()


@dataclass
class Manifest:
    """Blocks and samples of one dataset.

    Attributes:
        url: The dataset prefix URL in the cold tier.
        layout: A name in :data:`tierload.data.layouts.registry.LAYOUTS`.
        blocks: Every block (see :class:`tierload.data.blocks.Block`): a planner's list, or the
            columns of a mapped manifest (:class:`~tierload.data.block_columns.BlockColumns`,
            which make a ``Block`` only when one is indexed).
        sample_block: int32 (num_samples,): block index of each sample.
        sample_index: int32 (num_samples,): position of each sample inside its block.
        labels: int64 (num_samples,): class index, or -1 where the label comes with the data.
        classes: Class names, indexed by label.
        extra: Layout-specific data (Parquet footers).
        skipped: Objects listed but not used, with the reason.
        created_at: Unix time (seconds) of the listing.
    """

    url: str
    layout: str
    blocks: Sequence[Block]
    sample_block: np.ndarray
    sample_index: np.ndarray
    labels: np.ndarray
    classes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0

    @property
    def num_samples(self) -> int:
        return int(self.sample_block.shape[0])

    @property
    def total_bytes(self) -> int:
        """Sum of block sizes in bytes."""
        return int(block_lengths(self.blocks).sum())

    @property
    def dataset_id(self) -> str:
        """Identity of this exact content: changes whenever any block (or its version) changes."""
        if not hasattr(self, "_dataset_id"):
            digest = xxhash.xxh3_128()
            digest.update(self.url.encode())
            digest_keys(digest, self.blocks)
            self._dataset_id = digest.hexdigest()[:24]
        return self._dataset_id

    @property
    def samples_digest(self) -> str:
        """Identity of the sample -> block mapping: a hash of ``sample_block`` (its dtype and
        values). Two manifests of one dataset id (the same blocks) may cut different samples from
        them, e.g. token windows of two lengths; a node cache derives a stream's plan over the
        column with the digest the job names (:class:`~tierload.wire.messages.SeededStreamPlan`)."""
        if not hasattr(self, "_samples_digest"):
            column = np.ascontiguousarray(self.sample_block)
            digest = xxhash.xxh3_64(column.dtype.str.encode())
            digest.update(column.data)  # the column's bytes in place, no copy
            self._samples_digest = digest.hexdigest()
        return self._samples_digest

    @property
    def pack_index(self) -> MemberSpans:
        """Where each sample lies inside its block (layouts with one sample per object)."""
        if not hasattr(self, "_pack_index"):
            if isinstance(self.blocks, BlockColumns):  # mapped: read from the columns per block, no Block made
                self._pack_index: MemberSpans = ColumnSpans(self.blocks)
            else:
                self._pack_index = PackIndex.of(self.blocks)
        return self._pack_index

    @property
    def num_packs(self) -> int:
        """Blocks that are packs of small objects."""
        return pack_count(self.blocks)

    def decoder(self, label_column: str | None = "label", columns: list[str] | None = None) -> BlockDecoder:
        """The block decoder for this layout (see :mod:`tierload.data.layouts.registry`)."""
        return layout_spec(self.layout).decoder(self, label_column, columns)

    def projected(self, columns: list[str] | None, label_column: str | None = "label") -> "Manifest":
        """This manifest with blocks that hold only ``columns`` (and ``label_column``), for layouts
        that fetch columns apart (Parquet: each row group's wanted column chunks); itself when
        ``columns`` is None or the layout selects columns after decoding.

        The projected blocks have their own keys, so the returned manifest has its own
        :attr:`dataset_id` and never shares a cached block with another projection.

        Raises:
            ConfigError: A column is not in the data (layouts that project).
        """
        project = layout_spec(self.layout).project
        if columns is None or project is None:
            return self
        blocks = project(self, list(columns), label_column)
        # Equal, not identical: a mapped manifest makes a new Block each time one is indexed.
        if blocks is self.blocks or all(new == old for new, old in zip(blocks, self.blocks, strict=True)):
            return self
        return dataclasses.replace(self, blocks=blocks)

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT_VERSION, "url": self.url, "layout": self.layout, "created_at": self.created_at,
            "blocks": {"key": [b.key for b in self.blocks], "url": [b.url for b in self.blocks],
                       "version": [b.version for b in self.blocks], "offset": [b.offset for b in self.blocks],
                       "length": [b.length for b in self.blocks]},
            "sample_block": _encode_array(self.sample_block), "sample_index": _encode_array(self.sample_index),
            "labels": _encode_array(self.labels), "classes": self.classes, "extra": self.extra,
            "skipped": self.skipped,
            "packs": {str(index): [b.members.urls.to_pylist(), b.members.versions.to_pylist(),
                                   b.members.sizes.tolist(),
                                   None if b.members.offsets is None else b.members.offsets.tolist()]
                      for index, b in enumerate(self.blocks) if b.members is not None},
        })

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        data = json.loads(text)
        if data.get("format") != FORMAT_VERSION:
            raise ManifestError(f"cached manifest has format {data.get('format')!r}, expected {FORMAT_VERSION}")
        # Imported here: a JSON manifest's packs are Arrow columns (the mapped file's need no pyarrow).
        from tierload.data.packs import PackMembers

        columns = data["blocks"]
        packs = {int(index): PackMembers.of(pack[0], pack[1], pack[2], pack[3] if len(pack) > 3 else None)
                 for index, pack in data["packs"].items()}
        blocks = [Block(*row, packs.get(index)) for index, row in enumerate(zip(
            columns["key"], columns["url"], columns["version"], columns["offset"], columns["length"], strict=True))]
        return cls(url=data["url"], layout=data["layout"], blocks=blocks,
                   sample_block=_decode_array(data["sample_block"]), sample_index=_decode_array(data["sample_index"]),
                   labels=_decode_array(data["labels"]), classes=data["classes"], extra=data["extra"],
                   skipped=data["skipped"], created_at=data["created_at"])


def partial_path(path: Path, pid: int) -> Path:
    """Where process ``pid``'s :func:`save_manifest` writes ``path`` before renaming it into place."""
    return path.with_suffix(f".{pid}.tmp")


def open_manifest(path: str | os.PathLike) -> Manifest:
    """Map a manifest written by :func:`~tierload.data.manifest_arrow.save_manifest` (a JSON
    manifest is read as text).

    Sample arrays are read-only numpy views of the mapped file, and keys, URLs and versions string
    columns over it, so processes that open (or fork from) the same file share its pages. The file
    is mapped through its column index with numpy alone
    (:func:`~tierload.data.manifest_columns.indexed_columns`), or with pyarrow when it has no
    usable index.

    Raises:
        OSError: The file cannot be read.
        ManifestError: It is not a tierload manifest of this format.
    """
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic != b"ARROW1":
        return Manifest.from_json(Path(path).read_text(encoding="utf-8"))
    columns = indexed_columns(path)
    if columns is None:
        # Imported here: only a file without its index (written before indexes, or left by a
        # crash between its renames) needs pyarrow to be read.
        from tierload.data.manifest_arrow import arrow_columns

        columns = arrow_columns(path)
    return _manifest_of(columns, path)


def _manifest_of(columns: FileColumns, path: str | os.PathLike) -> Manifest:
    """The manifest over a file's mapped columns.

    Raises:
        ManifestError: Not this format, or a column is missing.
    """
    meta = columns.meta
    if meta.get("format") != FORMAT_VERSION:
        raise ManifestError(f"cached manifest has format {meta.get('format')!r}, expected {FORMAT_VERSION}")
    numbers, strings = columns.numbers, columns.strings
    try:
        listing = MemberColumns(strings["member_url"], strings["member_version"], numbers["member_size"],
                                numbers.get("member_offset"))
        # Columns over the mapped file: a Block is made when one is indexed (no Python object per block).
        blocks = BlockColumns(strings["block_key"], strings["block_url"], strings["block_version"],
                              numbers["block_offset"], numbers["block_length"], numbers["pack_block"],
                              numbers["pack_first"], numbers["member_id"], listing)
        manifest = Manifest(url=meta["url"], layout=meta["layout"], blocks=blocks,
                            sample_block=numbers["sample_block"], sample_index=numbers["sample_index"],
                            labels=numbers["labels"], classes=meta["classes"], extra=meta["extra"],
                            skipped=meta["skipped"], created_at=meta["created_at"])
    except KeyError as exc:
        raise ManifestError(f"{str(path)!r} is not a tierload manifest: it has no {exc} column") from None
    if isinstance(meta.get("dataset_id"), str):  # written by save_manifest since issue 25 (older files: digested)
        manifest._dataset_id = meta["dataset_id"]
    return manifest


def manifest_identity(source: ColdSource, config: ManifestConfig, layout: str | None) -> str:
    """What a cached manifest must have been built from to be reused, as one canonical JSON text.

    Every :class:`~tierload.config.models.ManifestConfig` field but ``cache_dir`` (layout, extensions,
    exclude, block and pack settings, label column, and any field added later), the layout
    override, the source's canonical URL (:func:`tierload.stores.cold.source.canonical_url`: ``s3a://``
    and doubled or trailing slashes name the same dataset) and its endpoint.
    """
    settings = config.model_dump(mode="json", exclude={"cache_dir"})
    settings["layout"] = layout or config.layout
    return json.dumps({"url": source.url, "endpoint": source.location.endpoint_url, "settings": settings},
                      sort_keys=True)


def cache_path(source: ColdSource, config: ManifestConfig, layout: str | None) -> Path:
    """Where the cached manifest of this :func:`manifest_identity` lives."""
    ident = xxhash.xxh3_64_hexdigest(manifest_identity(source, config, layout).encode())
    return Path(os.path.expanduser(config.cache_dir)) / f"{ident}.arrow"
