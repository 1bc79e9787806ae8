"""The consumer's side of a node cache: read blocks from the hot tier, else ask the cache.

Runs in the training process or a DataLoader worker. A block already in the hot tier is read
straight from its file and verified against its checksum; no byte goes through the cache
actor. Only a miss (or a corrupt copy) costs a call.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tierload import codec
from tierload.blockfile import decode_block
from tierload.cache.channel import ChannelClient
from tierload.errors import IntegrityError
from tierload.stores.local import LocalDirStore

log = logging.getLogger(__name__)


class BlockReader:
    """Reads a stream's blocks for one consumer.

    Args:
        client: Channel to the node cache.
        hot_dirs: The hot tier's level directories on this node, fastest first.
    """

    def __init__(self, client: ChannelClient, hot_dirs: list[str]) -> None:
        self.client = client
        self.levels = [LocalDirStore(Path(path), tier="hot") for path in hot_dirs]
        self.direct_hits = 0
        self.misses = 0

    def _read_hot(self, key: str, levels) -> tuple[bytes | None, bool]:
        """(raw bytes or None, whether a corrupt copy was found)."""
        for level in levels:
            try:
                stored = level.read(key)
            except KeyError:
                continue
            try:
                return decode_block(key, stored)[0], False
            except IntegrityError:
                log.warning("hot copy of block %s failed its checksum; asking the node cache to refetch", key)
                return None, True
        return None, False

    def read(self, stream_id: str, consumer: int, position: int, key: str) -> bytes:
        """Return the raw bytes of ``key`` needed at ``position`` of the stream.

        Raises:
            IntegrityError: The hot copy stayed corrupt after two refetches.
            TierloadError: The node cache could not fetch the block (the cause is kept).
        """
        raw, corrupt = self._read_hot(key, self.levels)
        if raw is not None:
            self.direct_hits += 1
            return raw
        self.misses += 1
        for _ in range(3):
            kind, value = self.client.call("acquire", stream_id, consumer, position, key if corrupt else None)
            if kind == "wire":
                return codec.decode(value)
            raw, corrupt = self._read_hot(key, self.levels[value:value + 1])
            if raw is not None:
                return raw
            corrupt = True  # announced as in the hot tier, yet missing or bad: have it replaced
        raise IntegrityError("hot copy is still unreadable after refetching it twice", tier="hot", key=key)
