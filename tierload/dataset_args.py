""":class:`~tierload.dataset.TieredDataset`'s arguments: checked, and turned into config overrides."""

from __future__ import annotations

import os
from typing import Any, Mapping

from tierload.errors import ConfigError
from tierload.layouts.registry import LAYOUT_NAMES
from tierload.order import SHUFFLE_MODES


def check_dataset_url(url: object) -> None:
    """The dataset prefix must be a URL with a scheme (``s3://bucket/train``, ``file:///data/train``):
    the scheme picks the cold tier's file system, and one spelling keeps one manifest per prefix.

    Raises:
        ConfigError: Not a string, or no ``scheme://``; for a bare path the message gives the
            ``file://`` URL of that path, or for a relative name that exists nowhere here
            (``bucket/train``) its ``s3://`` URL.
    """
    if not isinstance(url, str):
        raise ConfigError(f"url={url!r}: give the dataset prefix as a URL string, e.g. s3://bucket/train")
    if "://" not in url:
        local = os.path.abspath(os.path.expanduser(url))
        if url.startswith(("/", "~", ".")) or os.path.exists(local):
            raise ConfigError(f"url={url!r}: give the dataset prefix as a URL, e.g. s3://bucket/train, or "
                              f"file://{local} for that local directory")
        # A relative name that is nothing here: far more often a bucket named without its scheme.
        raise ConfigError(f"url={url!r} has no scheme: give s3://{url.lstrip('/')} for that bucket and prefix "
                          f"(there is no local directory {local}; a local one is file:///path/to/dir)")


def check_arguments(url: str, shuffle: bool | str, batch_size: int | None, layout: str | None,
                    rank: int | None, world_size: int | None, window_blocks: int) -> str:
    """Validate :class:`~tierload.dataset.TieredDataset`'s arguments; return the shuffle mode as a string.

    Raises:
        ConfigError: The first bad argument, named with its value.
    """
    check_dataset_url(url)
    if isinstance(shuffle, bool):
        shuffle = "auto" if shuffle else "none"
    if shuffle not in (*SHUFFLE_MODES, "auto"):
        raise ConfigError(f"shuffle={shuffle!r}; use True/False or one of {', '.join(SHUFFLE_MODES)}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ConfigError(f"batch_size={batch_size!r}; it must be a positive int or None")
    if layout is not None and layout not in LAYOUT_NAMES:
        raise ConfigError(f"layout={layout!r}; choose one of {', '.join(LAYOUT_NAMES)} or None")
    if world_size is not None and (world_size < 1 or rank is None or not 0 <= rank < world_size):
        raise ConfigError(f"rank={rank!r}, world_size={world_size!r}; need 0 <= rank < world_size")
    if window_blocks < 1:
        raise ConfigError(f"window_blocks={window_blocks}; it must be >= 1")
    return shuffle


def config_overrides(endpoint_url: str | None, storage_options: Mapping[str, Any] | None,
                     address: str | None) -> dict[str, Any]:
    """The explicit arguments that are config settings, as overrides for
    :func:`~tierload.config.load_config` (they win over environment, YAML and defaults)."""
    overrides: dict[str, Any] = {}
    if endpoint_url:
        overrides.setdefault("cold", {})["endpoint_url"] = endpoint_url
    if storage_options:
        overrides.setdefault("cold", {})["storage_options"] = dict(storage_options)
    if address:
        overrides["ray"] = {"address": address}
    return overrides
