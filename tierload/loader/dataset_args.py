""":class:`~tierload.loader.dataset.TieredDataset`'s arguments: checked, and turned into config overrides."""

from __future__ import annotations

from types import FrameType
from typing import Any, Mapping

from tierload.config.models import LAYOUT_NAMES
from tierload.data.order import SHUFFLE_MODES
from tierload.errors import ConfigError
from tierload.stores.cold.location import check_dataset_url


def check_arguments(url: str, shuffle: bool | str, batch_size: int | None, layout: str | None,
                    rank: int | None, world_size: int | None, window_blocks: int) -> str:
    """Validate :class:`~tierload.loader.dataset.TieredDataset`'s arguments; return the shuffle mode as a string.

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


def loader_batch_size(caller: FrameType | None) -> int | None:
    """The batch size of the DataLoader whose fetcher is ``caller``, or None when that is unknown.

    PyTorch tells an ``IterableDataset`` nothing about the DataLoader that iterates it. The first
    ``next()`` of an iteration comes from the loader's fetcher (``fetch(possibly_batched_index)``
    of ``torch.utils.data._utils.fetch``, in the main process or in a worker; torchdata's
    ``StatefulDataLoader`` keeps the same shape), whose index list is one batch long when the
    loader batches (``auto_collation``).

    Args:
        caller: The frame that asked for the iteration's first sample.

    Returns:
        The loader's batch size in samples; None when the caller is not such a fetcher (the
        dataset iterated directly or through a wrapper) or the loader does not batch
        (``batch_size=None``).
    """
    if caller is None or caller.f_code.co_name != "fetch":
        return None
    fetcher = caller.f_locals.get("self")
    index = caller.f_locals.get("possibly_batched_index")
    if not getattr(fetcher, "auto_collation", False) or not isinstance(index, (list, tuple)):
        return None
    return len(index)


def check_loader_batch(batch_size: int | None, loader_batch: int | None) -> None:
    """Refuse a DataLoader whose batch size differs from ``TieredDataset(batch_size=...)``.

    Workers take ``batch_size``-sample chunks in turn, and ``state_dict(batches_consumed=k)``
    counts ``k * batch_size`` samples: under another loader batch size a batch mixes chunks of
    different workers and a resumed epoch repeats or skips samples.

    Args:
        batch_size: The dataset's ``batch_size`` (None: not given, nothing to compare).
        loader_batch: The loader's (see :func:`loader_batch_size`; None: unknown).

    Raises:
        ConfigError: Both are known and differ; the message names both values.
    """
    if batch_size is not None and loader_batch is not None and loader_batch != batch_size:
        raise ConfigError(f"TieredDataset(batch_size={batch_size}) is iterated by a DataLoader with "
                          f"batch_size={loader_batch}: its batches would mix workers' {batch_size}-sample chunks "
                          "and a resumed epoch would repeat or skip samples; give the DataLoader and the "
                          f"TieredDataset the same batch_size (e.g. both {loader_batch})")


def config_overrides(endpoint_url: str | None, storage_options: Mapping[str, Any] | None,
                     address: str | None) -> dict[str, Any]:
    """The explicit arguments that are config settings, as overrides for
    :func:`~tierload.config.loading.load_config` (they win over environment, YAML and defaults)."""
    overrides: dict[str, Any] = {}
    if endpoint_url:
        overrides.setdefault("cold", {})["endpoint_url"] = endpoint_url
    if storage_options:
        overrides.setdefault("cold", {})["storage_options"] = dict(storage_options)
    if address:
        overrides["ray"] = {"address": address}
    return overrides
