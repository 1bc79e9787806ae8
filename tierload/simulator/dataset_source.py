"""The dataset a simulation reads: a block count, a cached manifest file, or the cold prefix itself."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from tierload.config.models import TierloadConfig
from tierload.data.block_columns import block_lengths
from tierload.data.manifest_settings import manifest_settings
from tierload.errors import ConfigError
from tierload.simulator.trace import DatasetShape


def is_url(text: str) -> bool:
    """Whether ``--dataset`` names a storage prefix (``s3://bucket/prefix``, ``file:///data``)."""
    return "://" in text


def shape_from_listing(url: str, config: TierloadConfig, *, layout: str | None = None,
                       refresh: bool = False) -> DatasetShape:
    """Block count and sizes of the dataset under ``url``, from its manifest.

    The manifest is the one a :class:`tierload.loader.dataset.TieredDataset` would use: cached under
    ``manifest.cache_dir``, else built by listing the prefix (with ``cold`` credentials and
    endpoint) and cached.

    Raises:
        ManifestError: The prefix holds nothing readable.
        BackendError: The listing failed.
    """
    from tierload.data.manifest_build import load_manifest
    from tierload.stores.cold.source import ColdSource

    manifest = load_manifest(ColdSource(url, config.cold), manifest_settings(config), layout, refresh=refresh)
    sizes = np.array(block_lengths(manifest.blocks), dtype=np.int64)
    return DatasetShape(manifest.sample_block.astype(np.int64), sizes, manifest.url)


def dataset_shape(dataset: str, config: TierloadConfig, *, block_bytes: int, size_spread: float = 0.0,
                  samples_per_block: int = 1, seed: int = 0, layout: str | None = None,
                  refresh: bool = False) -> DatasetShape:
    """``--dataset``: a number of blocks (synthetic), a storage URL (listed) or a manifest JSON file.

    Raises:
        ConfigError: A manifest file that is missing or is not one.
        ManifestError, BackendError: A URL that cannot be listed.
    """
    if dataset.isdigit():
        return DatasetShape.uniform(int(dataset), block_bytes, samples_per_block=samples_per_block,
                                    size_spread=size_spread, seed=seed)
    if is_url(dataset):
        return shape_from_listing(dataset, config, layout=layout, refresh=refresh)
    return DatasetShape.from_manifest(dataset)


def mixed_shape(specs: Sequence[str], shape_of: Callable[[str], DatasetShape], shuffle: str = "auto",
                window_blocks: int = 8) -> DatasetShape:
    """``--mix DATASET=WEIGHT ...``: the sources' shapes joined as a weighted mixture
    (:meth:`DatasetShape.mixed`); each DATASET is read by ``shape_of`` as ``--dataset`` is.

    Raises:
        ConfigError: A spec without ``=WEIGHT``, a weight that is not a number, or bad weights.
    """
    parts, weights = [], []
    for spec in specs:
        name, sep, weight = spec.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            weights.append(float(weight))
        except ValueError:
            raise ConfigError(f"--mix {spec!r}; give DATASET=WEIGHT, e.g. s3://bucket/web=0.7") from None
        shape = shape_of(name)
        parts.append(shape if shape.name != "dataset" else DatasetShape(shape.sample_block, shape.block_bytes, name))
    return DatasetShape.mixed(parts, weights, shuffle=shuffle, window_blocks=window_blocks)
