"""The manifest: every block and sample of a dataset, built once by listing the cold prefix.

It is cached as an Arrow IPC file under ``manifest.cache_dir`` (keyed by URL, layout, endpoint,
block and pack sizes) and memory-mapped when read, so a second start does not list again;
``refresh=True`` (``tierload manifest --refresh``) lists anew.
A changed object gets a new block key (the key includes the ETag), so a refreshed manifest
can never be served an old cached copy.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from tierload.arrow_values import from_numpy, int64_array, large_strings, to_numpy
from tierload.config.models import ManifestConfig
from tierload.data.block_columns import BlockColumns, ColumnSpans, block_lengths, digest_keys, pack_count
from tierload.data.blocks import Block
from tierload.data.layouts.base import BlockDecoder
from tierload.data.layouts.registry import LAYOUTS, layout_spec
from tierload.data.packs import ListedMembers, MemberSpans, PackIndex, PackMembers
from tierload.errors import ManifestError
from tierload.process_memory import release_freed_memory
from tierload.stores.cold.listing import ObjectListing
from tierload.stores.cold.source import ColdSource
from tierload.stores.dir_trust import make_private_dirs, open_new_file

log = logging.getLogger(__name__)
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
        columns = data["blocks"]
        packs = {int(index): PackMembers.of(pack[0], pack[1], pack[2], pack[3] if len(pack) > 3 else None)
                 for index, pack in data["packs"].items()}
        blocks = [Block(*row, packs.get(index)) for index, row in enumerate(zip(
            columns["key"], columns["url"], columns["version"], columns["offset"], columns["length"], strict=True))]
        return cls(url=data["url"], layout=data["layout"], blocks=blocks,
                   sample_block=_decode_array(data["sample_block"]), sample_index=_decode_array(data["sample_index"]),
                   labels=_decode_array(data["labels"]), classes=data["classes"], extra=data["extra"],
                   skipped=data["skipped"], created_at=data["created_at"])


def _one_row(values: pa.Array) -> pa.Array:
    """``values`` as the single row of a large-list column (columns of any length share one table)."""
    return pa.LargeListArray.from_arrays(int64_array([0, len(values)]), values)


def _joined(slices: list[pa.Array]) -> pa.Array:
    """``slices`` as one large_string array; without a copy when they are consecutive slices of one array.

    The planner cuts every pack's members out of one listing in order, so at a million keys this
    saves writing the manifest with a second copy of every URL and version in memory.
    """
    strings = pa.large_string()
    if not slices:
        return large_strings([])
    first = slices[0]
    shared = [b.address if b is not None else None for b in first.buffers()]
    contiguous = first.type == strings and all(
        s.type == strings and [b.address if b is not None else None for b in s.buffers()] == shared
        and s.offset == before.offset + len(before) for before, s in zip(slices[:-1], slices[1:], strict=True))
    if contiguous and first.null_count == 0:
        return pa.Array.from_buffers(strings, sum(len(s) for s in slices), first.buffers(), offset=first.offset)
    return pa.concat_arrays([s.cast(strings) for s in slices])


def _member_columns(members: list[PackMembers]) -> tuple[PackMembers, np.ndarray]:
    """The listing that ``members`` refer to, and their rows in it (concatenated, pack order).

    Packs planned out of listing order share one listing (:class:`~tierload.data.packs.ListedMembers`):
    it is written once, as it is, with each member's row. Others are written as their
    concatenation, row ``i`` being member ``i``.
    """
    listings = {id(m.listing): m.listing for m in members if isinstance(m, ListedMembers)}
    if members and len(listings) == 1 and all(isinstance(m, ListedMembers) for m in members):
        ids = np.concatenate([m.ids for m in members if isinstance(m, ListedMembers)])
        return next(iter(listings.values())), ids
    offsets = (np.concatenate([m._offsets_or_zeros() for m in members])
               if any(m.offsets is not None for m in members) else None)
    joined = PackMembers(_joined([m.urls for m in members]), _joined([m.versions for m in members]),
                         np.concatenate([m.sizes for m in members] or [np.zeros(0, np.int64)]), offsets)
    count = len(joined.sizes)
    return joined, np.arange(count, dtype=np.int32 if count < 2**31 else np.int64)


def partial_path(path: Path, pid: int) -> Path:
    """Where process ``pid``'s :func:`save_manifest` writes ``path`` before renaming it into place."""
    return path.with_suffix(f".{pid}.tmp")


def save_manifest(manifest: Manifest, path: Path) -> None:
    """Write ``manifest`` as an Arrow IPC file (one row; every column a list), atomically.

    The file is what :func:`open_manifest` maps: sample arrays and pack members are read from it
    in place, never parsed. Pack members are rows of one member listing (``member_*``):
    ``member_id`` (int32) gives each pack's rows, packs ``pack_first`` apart.
    """
    packs = [index for index, block in enumerate(manifest.blocks) if block.members is not None]
    members = [member for member in (manifest.blocks[index].members for index in packs) if member is not None]
    pack_first = np.zeros(len(packs) + 1, dtype=np.int64)
    np.cumsum([len(m) for m in members], out=pack_first[1:])
    listing, member_ids = _member_columns(members)
    strings = pa.large_string()
    columns = {
        "sample_block": from_numpy(np.asarray(manifest.sample_block, np.int32)),
        "sample_index": from_numpy(np.asarray(manifest.sample_index, np.int32)),
        "labels": int64_array(manifest.labels),
        "block_key": large_strings([b.key for b in manifest.blocks]),
        "block_url": large_strings([b.url for b in manifest.blocks]),
        "block_version": large_strings([b.version for b in manifest.blocks]),
        "block_offset": int64_array(b.offset for b in manifest.blocks),
        "block_length": int64_array(b.length for b in manifest.blocks),
        "pack_block": int64_array(packs),
        "pack_first": int64_array(pack_first),
        "member_id": from_numpy(member_ids),
        "member_url": listing.urls.cast(strings),
        "member_version": listing.versions.cast(strings),
        "member_size": int64_array(listing.sizes),
    }
    if listing.offsets is not None:  # members that are byte ranges of their objects
        columns["member_offset"] = int64_array(listing.offsets)
    # dataset_id too: a process that maps the file then never reads the key column to digest it
    # (tens of MB of its pages at a million blocks).
    meta = {"format": FORMAT_VERSION, "url": manifest.url, "layout": manifest.layout,
            "created_at": manifest.created_at, "classes": manifest.classes, "extra": manifest.extra,
            "skipped": manifest.skipped, "dataset_id": manifest.dataset_id}
    table = pa.table({name: _one_row(values) for name, values in columns.items()},
                     metadata={"tierload": json.dumps(meta)})
    # A listing names every object of the dataset: owner-only, as the tiers (issue 26 item 3).
    make_private_dirs(path.parent)
    tmp = partial_path(path, os.getpid())  # renamed when whole: a reader never maps a partial file
    open_new_file(tmp).close()  # created 0600; Arrow's writer below truncates it and keeps its mode
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(tmp, path)


def open_manifest(path: str | os.PathLike) -> Manifest:
    """Map a manifest written by :func:`save_manifest` (a JSON manifest is read as text).

    Sample arrays are read-only numpy views of the mapped file and pack members Arrow slices of
    it, so processes that open (or fork from) the same file share its pages.

    Raises:
        OSError: The file cannot be read.
        ManifestError: It is not a tierload manifest of this format.
    """
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic != b"ARROW1":
        return Manifest.from_json(Path(path).read_text(encoding="utf-8"))
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        meta = json.loads((table.schema.metadata or {})[b"tierload"])
    except (pa.ArrowInvalid, KeyError, ValueError) as exc:
        raise ManifestError(f"{str(path)!r} is not a tierload manifest: {exc}") from None
    if meta.get("format") != FORMAT_VERSION:
        raise ManifestError(f"cached manifest has format {meta.get('format')!r}, expected {FORMAT_VERSION}")

    def column(name: str) -> pa.Array:
        return table.column(name).chunk(0).values

    def numbers(name: str) -> np.ndarray:
        return to_numpy(column(name))

    offsets = numbers("member_offset") if "member_offset" in table.column_names else None
    listing = PackMembers(column("member_url"), column("member_version"), numbers("member_size"), offsets)
    # Columns over the mapped file: a Block is made when one is indexed (no Python object per block).
    blocks = BlockColumns(column("block_key"), column("block_url"), column("block_version"), numbers("block_offset"),
                          numbers("block_length"), numbers("pack_block"), numbers("pack_first"),
                          numbers("member_id"), listing)
    manifest = Manifest(url=meta["url"], layout=meta["layout"], blocks=blocks, sample_block=numbers("sample_block"),
                        sample_index=numbers("sample_index"), labels=numbers("labels"), classes=meta["classes"],
                        extra=meta["extra"], skipped=meta["skipped"], created_at=meta["created_at"])
    if isinstance(meta.get("dataset_id"), str):  # written by save_manifest since issue 25 (older files: digested)
        manifest._dataset_id = meta["dataset_id"]
    return manifest


# URLs lower-cased at once by detect_layout (bounds its transient memory).
_DETECT_WINDOW = 65536


def detect_layout(objects: ObjectListing, config: ManifestConfig) -> str:
    """Pick the layout from what the listing holds (``manifest.layout: auto``)."""
    import pyarrow.compute as pc  # here: a process that only maps a manifest never loads it (~9 MB)

    suffixes = [spec.suffix for spec in LAYOUTS.values() if spec.suffix is not None]
    every = dict.fromkeys(suffixes, True)
    nonempty = False
    extension = False
    # A window of URLs at a time: lower-casing the whole listing at once would copy every URL.
    for lo in range(0, len(objects), _DETECT_WINDOW):
        sizes = objects.sizes[lo:lo + _DETECT_WINDOW]
        names = pc.utf8_lower(objects.urls.slice(lo, len(sizes)).filter(from_numpy(sizes > 0)))
        if not len(names):
            continue
        nonempty = True
        for suffix in suffixes:
            every[suffix] = every[suffix] and bool(pc.all(pc.ends_with(names, suffix)).as_py())
        extension = extension or any(bool(pc.any(pc.ends_with(names, e)).as_py()) for e in config.extensions)
    for spec in LAYOUTS.values():
        if nonempty and spec.suffix is not None and every[spec.suffix]:
            return spec.name
    return "imagefolder" if extension else "files"


def build_manifest(source: ColdSource, config: ManifestConfig, layout: str | None = None) -> Manifest:
    """List the cold prefix and describe the dataset.

    Args:
        source: The cold tier under the dataset prefix.
        config: Manifest settings.
        layout: Overrides ``config.layout``; a name in :data:`tierload.data.layouts.registry.LAYOUTS`, or
            ``auto``.

    Raises:
        ConfigError: Unknown layout (before anything is listed).
        ManifestError: Nothing to read.
        BackendError: The listing failed (unreachable endpoint, missing bucket ...).
    """
    chosen = layout or config.layout
    if chosen != "auto":
        layout_spec(chosen)  # a misspelt layout fails now, not after listing millions of keys
    objects = source.list_objects(exclude=tuple(config.exclude), spill_dir=os.path.expanduser(config.cache_dir))
    if len(objects) == 0:
        unreadable = f"; {len(objects.unreadable)} skipped: {objects.unreadable}" if objects.unreadable else ""
        raise ManifestError(f"the prefix holds no objects{unreadable}", tier="cold", url=source.url)
    if chosen == "auto":
        chosen = detect_layout(objects, config)
    plan = layout_spec(chosen).plan(source, objects, config)
    log.info("manifest of %s: %d objects -> %d blocks, %d samples (%s)", source.url, len(objects),
             len(plan.blocks), len(plan.sample_block), chosen)
    return Manifest(url=source.url, layout=chosen, blocks=plan.blocks, sample_block=plan.sample_block,
                    sample_index=plan.sample_index, labels=plan.labels, classes=plan.classes, extra=plan.extra,
                    skipped={**objects.unreadable, **plan.skipped}, created_at=time.time())


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


def load_manifest(source: ColdSource, config: ManifestConfig, layout: str | None = None,
                  refresh: bool = False) -> Manifest:
    """Return the cached manifest, or list the prefix and cache the result.

    Args:
        source: The cold tier under the dataset prefix.
        config: Manifest settings (``cache_dir``).
        layout: Layout override (see :func:`build_manifest`).
        refresh: List again even when a cached manifest exists.
    """
    path = cache_path(source, config, layout)
    if not refresh and path.is_file():
        try:
            return open_manifest(path)
        except (ValueError, KeyError, ManifestError) as exc:
            log.warning("cached manifest %s is unreadable (%s); listing again", path, exc)
    manifest = build_manifest(source, config, layout)
    release_freed_memory()  # the listing and the plan's temporaries
    save_manifest(manifest, path)
    del manifest
    release_freed_memory()
    # The mapped file replaces the listing's arrays: its pages are shared and only read when used.
    return open_manifest(path)
