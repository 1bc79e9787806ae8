"""A dataset's cold store must be readable from the node cache's process, not only from the caller's."""

from __future__ import annotations

from tierload.errors import ConfigError
from tierload.stores.cold.source import ColdSource


def refuse_process_local(source: ColdSource) -> None:
    """Refuse a store that lives inside one process (``memory://``): the node cache reads the cold
    tier from its own process (a Ray actor), where such a store is empty.

    Raises:
        ConfigError: Naming the URL and what would work instead.
    """
    if source.backend.process_local:
        raise ConfigError(f"{source.url}: a {source.protocol}:// store lives inside this process, and the node cache "
                          "that reads the cold tier runs in another (a Ray actor), where it is empty; put the data "
                          "in a store every process can reach (file:///path, s3://, gs://, az://, http://) or read "
                          "it in this process with tierload.stores.cold.source.ColdSource",
                          tier="cold", url=source.url)
