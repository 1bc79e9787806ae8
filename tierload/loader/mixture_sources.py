"""The sources of a mixture (``TieredDataset([Source(...), ...])``): listed, joined into one dataset.

Each :class:`Source` has its own URL, layout, columns and cold-tier options. The sources'
manifests are loaded as a single dataset would load them (cached, memory-mapped), then joined
into one manifest: blocks concatenated (source ``s``'s block ``b`` is ``block_offsets[s] + b``),
samples concatenated (global id ``sample_offsets[s] + i``). That one block list is registered
with the node cache under the mixture's own dataset id, after each source's own registration
(so a block's cold reads go to its own source), and the mixed order plans as one stream with
one hot and warm budget. The order itself is :class:`tierload.data.mixture.Mixture`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from tierload.config.models import LAYOUT_NAMES, TierloadConfig
from tierload.data.block_columns import BlocksByKey
from tierload.data.layouts.registry import layout_spec
from tierload.data.manifest import Manifest
from tierload.data.manifest_helper import load_manifest_apart
from tierload.data.manifest_settings import manifest_settings
from tierload.data.mixture import Mixture
from tierload.data.order import resolve_shuffle
from tierload.errors import ConfigError
from tierload.loader.consumer import DirectSource, NodeLink
from tierload.loader.dataset_link import register_dataset
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.location import ColdLocation, canonical_url, check_dataset_url
from tierload.stores.cold.source import ColdSource
from tierload.wire.messages import BlockTable, DatasetRegistration


@dataclass(frozen=True)
class Source:
    """One source of a mixture (MosaicML Streaming's ``Stream``, LitData's per-dataset weight).

    Args:
        url: The source's prefix, e.g. ``s3://bucket/web`` or ``file:///data/code``.
        weight: Its relative share of every epoch (>= 0; weights need not sum to 1; 0: unused).
        layout: Its layout (None: ``manifest.layout`` of the config, ``auto`` by default).
        columns: Columns to read (Parquet/Arrow), as ``TieredDataset(columns=)``.
        endpoint_url: Its S3 endpoint (wins over the config's).
        storage_options: fsspec/s3fs options merged into the config's ``cold.storage_options``.

    Raises:
        ConfigError: A bad URL, weight or layout (named with its value).
    """

    url: str
    weight: float = 1.0
    layout: str | None = None
    columns: tuple[str, ...] | None = None
    endpoint_url: str | None = None
    storage_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        check_dataset_url(self.url)
        object.__setattr__(self, "url", canonical_url(self.url))
        try:
            weight = float(self.weight)
        except (TypeError, ValueError):
            raise ConfigError(f"Source({self.url!r}, weight={self.weight!r}); the weight must be a number") from None
        if not weight >= 0 or weight == float("inf"):
            raise ConfigError(f"Source({self.url!r}, weight={self.weight!r}); the weight must be finite and >= 0")
        object.__setattr__(self, "weight", weight)
        if self.layout is not None and self.layout not in LAYOUT_NAMES:
            raise ConfigError(f"Source({self.url!r}, layout={self.layout!r}); choose one of "
                              f"{', '.join(LAYOUT_NAMES)} or None")
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))

    def cold_config(self, config: TierloadConfig):
        """The config's cold settings with this source's endpoint and options applied."""
        update: dict[str, Any] = {}
        if self.endpoint_url:
            update["endpoint_url"] = self.endpoint_url
        if self.storage_options:
            update["storage_options"] = {**config.cold.storage_options, **dict(self.storage_options)}
        return config.cold.model_copy(update=update) if update else config.cold


def is_mixture(url: Any) -> bool:
    """Whether ``TieredDataset``'s first argument names several sources (a list, not a URL)."""
    return not isinstance(url, (str, bytes)) and isinstance(url, Sequence)


def sources_of(spec: Sequence[Source | Mapping[str, Any]], layout: str | None = None,
               columns: Sequence[str] | None = None) -> tuple[Source, ...]:
    """``Source`` objects from a list of them, of dicts (``{"url": ..., "weight": ...}``) or of URLs (weight 1).

    ``layout`` and ``columns`` (``TieredDataset``'s) apply to the sources that name none.

    Raises:
        ConfigError: An empty list, an entry that is neither, a dict with unknown keys, or
            two sources with one URL.
    """
    sources: list[Source] = []
    for index, entry in enumerate(spec):
        if isinstance(entry, Source):
            sources.append(entry)
        elif isinstance(entry, str):
            sources.append(Source(entry))
        elif isinstance(entry, Mapping):
            try:
                sources.append(Source(**entry))
            except TypeError as exc:
                raise ConfigError(f"sources[{index}]={dict(entry)!r}: {exc}; keys are url, weight, layout, "
                                  "columns, endpoint_url, storage_options") from None
        else:
            raise ConfigError(f"sources[{index}]={entry!r}; give a Source, a dict or a URL string")
    sources = [replace(source, layout=source.layout or layout,
                       columns=source.columns if source.columns is not None else
                       (tuple(columns) if columns is not None else None)) for source in sources]
    if not sources:
        raise ConfigError("TieredDataset([]) has no source; give at least one Source(url, weight=...)")
    urls = [source.url for source in sources]
    if len(set(urls)) != len(urls):
        raise ConfigError(f"sources {urls!r} name one URL twice; give each source once, with its weight")
    return tuple(sources)


class MixtureSources:
    """The sources of one mixture, their cold locations, and (after :meth:`load`) their manifests.

    Args:
        sources: The sources (see :func:`sources_of`).
        config: The dataset's configuration.
    """

    def __init__(self, sources: tuple[Source, ...], config: TierloadConfig) -> None:
        self.sources = sources
        self.config = config
        self.colds = [ColdLocation.resolve(source.url, source.cold_config(config)) for source in sources]
        self.parts: list[Manifest] = []
        self.paths: list[Any] = []

    @property
    def url(self) -> str:
        """The mixture's name: its sources' URLs (part of its manifest's identity)."""
        return "mixture:" + "|".join(source.url for source in self.sources)

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(source.weight for source in self.sources)

    def load(self, refresh: bool = False) -> Manifest:
        """Load (or list) every source's manifest; return the joined one.

        Raises:
            BackendError, ManifestError: A source cannot be listed or holds no samples.
        """
        settings = manifest_settings(self.config)
        self.parts, self.paths = [], []
        for source, cold in zip(self.sources, self.colds, strict=True):
            # Listed and written by a helper process, as a single dataset's: this one maps the file.
            listed, path = load_manifest_apart(ColdSource(cold, source.cold_config(self.config)), settings,
                                               source.layout, refresh=refresh)
            projected = listed.projected(list(source.columns) if source.columns else None, settings.label_column)
            self.parts.append(projected)
            self.paths.append(path if projected is listed else None)
        return self._joined()

    def _joined(self) -> Manifest:
        parts = self.parts
        block_offsets = np.cumsum([0] + [len(part.blocks) for part in parts])
        # The layout decides only whether blocks may go straight to a device: any source that
        # cannot makes the mixture unable to.
        layout = next((part.layout for part in parts if not layout_spec(part.layout).supports_direct_read),
                      parts[0].layout)
        return Manifest(
            url=self.url, layout=layout, blocks=[block for part in parts for block in part.blocks],
            sample_block=np.concatenate([part.sample_block.astype(np.int32) + int(offset)
                                         for part, offset in zip(parts, block_offsets[:-1].tolist(), strict=True)]),
            sample_index=np.concatenate([part.sample_index.astype(np.int32) for part in parts]),
            labels=np.concatenate([part.labels.astype(np.int64) for part in parts]),
            created_at=min(part.created_at for part in parts))

    def mixture(self, shuffle: str, window_blocks: int, epoch_samples: int | None,
                curriculum: Sequence[tuple[int, Sequence[float]]] | Mapping[int, Sequence[float]] | None) -> Mixture:
        """The order's arithmetic over the loaded sources (``shuffle`` resolved per source)."""
        steps = sorted(curriculum.items()) if isinstance(curriculum, Mapping) else list(curriculum or ())
        return Mixture(tuple(part.sample_block for part in self.parts), tuple(len(part.blocks) for part in self.parts),
                       self.weights,
                       tuple(resolve_shuffle(shuffle, part.num_samples, len(part.blocks)) for part in self.parts),
                       window_blocks=window_blocks, epoch_samples=epoch_samples,
                       curriculum=tuple((int(start), tuple(weights)) for start, weights in steps))

    def decoder(self, label_column: str | None) -> "MixtureDecoder":
        """One decoder for the joined block ids (each source's own decoder behind it)."""
        decoders = [part.decoder(label_column, list(source.columns) if source.columns else None)
                    for part, source in zip(self.parts, self.sources, strict=True)]
        return MixtureDecoder(decoders, np.cumsum([0] + [len(part.blocks) for part in self.parts]))

    def register(self, link: NodeLink, joined: Manifest) -> None:
        """Register each source (its blocks read from its own cold location), then the joined
        block list under the mixture's dataset id: the node cache plans the mixture as one stream."""
        for part, path, cold in zip(self.parts, self.paths, self.colds, strict=True):
            register_dataset(link, part, path, cold)
        # Each source's identity travels with the mixture: the cache admits this job to it only as
        # admitted to every source, and reads each block with its own source's credentials.
        parts = tuple((part.dataset_id, identity_of(cold)) for part, cold in zip(self.parts, self.colds, strict=True))
        known = link.call(lambda cache: cache.has_dataset(joined.dataset_id))
        registration = DatasetRegistration(joined.dataset_id, self.colds[0],
                                           BlockTable.of([] if known else joined.blocks), parts=parts)
        if not link.call(lambda cache: cache.register_dataset(registration)):  # the cache restarted meanwhile
            full = replace(registration, blocks=BlockTable.of(joined.blocks))
            link.call(lambda cache: cache.register_dataset(full))

    def direct_source(self, joined: Manifest) -> "MixtureDirectSource":
        """Reads without the node cache, each block from its own source."""
        return MixtureDirectSource([DirectSource(self.config, cold, BlocksByKey(part.blocks))
                                    for cold, part in zip(self.colds, self.parts, strict=True)])


class MixtureDecoder:
    """Decodes a joined block id with its source's decoder (picklable: it travels to workers)."""

    def __init__(self, decoders: list[Any], block_offsets: np.ndarray) -> None:
        self.decoders = decoders
        self.block_offsets = np.asarray(block_offsets, np.int64)

    def decode(self, block_index: int, data: bytes):
        source = int(np.searchsorted(self.block_offsets, block_index, side="right")) - 1
        return self.decoders[source].decode(block_index - int(self.block_offsets[source]), data)


class MixtureDirectSource:
    """:class:`DirectSource` over several sources: a key is read from the source that holds it."""

    def __init__(self, sources: list[DirectSource]) -> None:
        self.sources = sources
        self.secret = sources[0].secret

    def read(self, key: str) -> bytes:
        for source in self.sources:
            if key in source.blocks:
                return source.read(key)
        raise KeyError(key)
