"""The one registry of dataset layouts: name -> planner, decoder, and whether blocks read direct.

The manifest (planning and decoding), config validation (``manifest.layout``) and the dataset
(``layout=`` and the device path) all read :data:`LAYOUTS`; adding a layout is one entry here.
Each layout's module imports torch, Pillow or pyarrow, so the entries import it only when
called: reading this registry stays cheap (the config module imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from tierload.config.models import LAYOUT_NAMES
from tierload.data.layouts.base import BlockDecoder, LayoutPlan, ManifestView
from tierload.errors import ConfigError

if TYPE_CHECKING:
    from tierload.config.models import ManifestConfig
    from tierload.data.blocks import Block
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource

# (source, objects, manifest config) -> plan
Planner = Callable[["ColdSource", "ObjectListing", "ManifestConfig"], LayoutPlan]
# (manifest, label column, columns) -> decoder
DecoderFactory = Callable[[ManifestView, "str | None", "list[str] | None"], BlockDecoder]
# (manifest, columns, label column) -> the manifest's blocks holding only those columns
Projector = Callable[[ManifestView, "list[str]", "str | None"], "Sequence[Block]"]


@dataclass(frozen=True)
class LayoutSpec:
    """One layout as the registry knows it.

    Attributes:
        name: The name written in configs (``manifest.layout``) and passed as ``layout=``.
        plan: ``plan(source, objects, config) -> LayoutPlan``: blocks and samples from a listing
            (columns; layouts of a few large objects walk it as ``ObjectInfo`` values).
        decoder: ``decoder(manifest, label_column, columns) -> BlockDecoder``.
        supports_direct_read: Its blocks decode from a device buffer, so the dataset may read
            them straight into GPU memory (the kvikio path of :mod:`tierload.loader.gpu`).
        suffix: ``auto`` picks this layout when every non-empty object ends with it (None:
            never picked that way).
        description: One line for help texts.
        project: ``project(manifest, columns, label_column) -> blocks``: blocks that hold only
            those columns' bytes, for layouts that fetch columns apart (None: ``columns=``
            selects after decoding).
    """

    name: str
    plan: Planner
    decoder: DecoderFactory
    supports_direct_read: bool
    suffix: str | None
    description: str
    project: Projector | None = None


def _plan_imagefolder(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.objects import plan_objects

    return plan_objects(source.url, objects, extensions=tuple(e.lower() for e in config.extensions), skip_empty=True,
                        pack_threshold_bytes=config.pack_threshold_bytes, pack_target_bytes=config.pack_target_bytes,
                        pack_order=config.pack_order)


def _plan_files(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.objects import plan_objects

    return plan_objects(source.url, objects, extensions=None, skip_empty=False,
                        pack_threshold_bytes=config.pack_threshold_bytes, pack_target_bytes=config.pack_target_bytes,
                        pack_order=config.pack_order)


def _plan_parquet(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.parquet import plan_parquet

    return plan_parquet(source, list(objects), block_bytes=config.block_bytes)


def _plan_webdataset(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.webdataset import plan_webdataset

    return plan_webdataset(source, list(objects), block_bytes=config.block_bytes)


def _plan_npy(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.npy import plan_npy

    return plan_npy(source, list(objects), block_bytes=config.block_bytes)


def _plan_tokens(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.tokens import plan_tokens

    return plan_tokens(source, list(objects), block_bytes=config.block_bytes, seq_len=config.seq_len_tokens,
                       raw_dtype=config.token_dtype, cross_files=config.token_cross_files,
                       output=config.token_output)


def _plan_jsonl(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.lines import plan_lines

    return plan_lines(source, list(objects), block_bytes=config.block_bytes, parse=True,
                      on_bad_lines=config.on_bad_lines)


def _plan_lines(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.lines import plan_lines

    return plan_lines(source, list(objects), block_bytes=config.block_bytes, parse=False)


def _plan_arrow(source: ColdSource, objects: ObjectListing, config: ManifestConfig) -> LayoutPlan:
    from tierload.data.layouts.arrow import plan_arrow

    return plan_arrow(source, list(objects), block_bytes=config.block_bytes)


def _arrow_columns(manifest: ManifestView, columns: list[str], label_column: str | None) -> Sequence[Block]:
    from tierload.data.layouts.arrow import check_columns

    return check_columns(manifest, columns, label_column)


def _image_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.object_decoders import image_decoder

    return image_decoder(manifest.labels, manifest.pack_index)


def _raw_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.object_decoders import raw_decoder

    return raw_decoder(manifest.labels, manifest.pack_index)


def _parquet_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.parquet import ParquetDecoder

    ranges = [[(b.offset, b.length)] if b.members is None else [(offset, length) for _, _, offset, length
                                                                  in b.members.requests()]
              for b in manifest.blocks]
    return ParquetDecoder(manifest.extra, ranges, label_column, columns)


def _parquet_projection(manifest: ManifestView, columns: list[str], label_column: str | None) -> Sequence[Block]:
    from tierload.data.layouts.parquet import project_blocks

    return project_blocks(manifest, columns, label_column)


def _webdataset_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.webdataset import WebDatasetDecoder

    return WebDatasetDecoder(shards=[block.url for block in manifest.blocks])


def _npy_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.npy import NpyDecoder

    return NpyDecoder(manifest.extra)


def _tokens_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.tokens import TokenDecoder

    return TokenDecoder(manifest.extra)


def _jsonl_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.lines import LinesDecoder

    return LinesDecoder(manifest.extra, parse=True)


def _lines_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.lines import LinesDecoder

    return LinesDecoder(manifest.extra, parse=False)


def _arrow_decoder(manifest: ManifestView, label_column: str | None, columns: list[str] | None) -> BlockDecoder:
    from tierload.data.layouts.arrow import ArrowDecoder

    return ArrowDecoder(manifest.extra, label_column, columns)


LAYOUTS: Mapping[str, LayoutSpec] = {spec.name: spec for spec in (
    LayoutSpec("imagefolder", _plan_imagefolder, _image_decoder, False, None,
               "image files (manifest.extensions) in one folder per class"),
    LayoutSpec("parquet", _plan_parquet, _parquet_decoder, False, ".parquet",
               "Parquet files; a row group (its wanted column chunks with columns=) is a block, a row a sample",
               _parquet_projection),
    LayoutSpec("files", _plan_files, _raw_decoder, True, None,
               "any objects, one raw-bytes sample each"),
    LayoutSpec("webdataset", _plan_webdataset, _webdataset_decoder, False, ".tar",
               "WebDataset tar shards; members sharing a basename are one sample"),
    LayoutSpec("npy", _plan_npy, _npy_decoder, True, ".npy",
               ".npy arrays; a row of the first axis is a sample"),
    LayoutSpec("tokens", _plan_tokens, _tokens_decoder, False, None,
               "token files (.bin, .npy, Megatron-LM .bin + .idx) as windows of manifest.seq_len_tokens + 1 tokens"),
    LayoutSpec("jsonl", _plan_jsonl, _jsonl_decoder, False, ".jsonl",
               "JSONL files (.jsonl/.ndjson, plain or .zst/.gz); a line is a sample, parsed as JSON"),
    LayoutSpec("lines", _plan_lines, _lines_decoder, False, None,
               "text files (.txt, plain or .zst/.gz); a line is a sample, as raw bytes"),
    LayoutSpec("arrow", _plan_arrow, _arrow_decoder, False, ".arrow",
               "Arrow IPC files or streams (Hugging Face datasets shards); record batches are blocks, "
               "a row a sample", _arrow_columns),
)}
if tuple(LAYOUTS) != LAYOUT_NAMES:  # the names the configuration accepts, each with its entry here
    raise ImportError(f"the layout registry {tuple(LAYOUTS)} and config's LAYOUT_NAMES {LAYOUT_NAMES} differ")


def layout_spec(name: str) -> LayoutSpec:
    """The registry entry of ``name``.

    Raises:
        ConfigError: Unknown name (the message lists the known ones): a layout comes from the
            job's configuration or arguments, so it is a configuration error (CLI exit code 2).
    """
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ConfigError(f"unknown layout {name!r}; choose one of auto, {', '.join(LAYOUT_NAMES)}") from None
