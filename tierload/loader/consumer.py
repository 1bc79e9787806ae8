"""The consumer's side of a node cache: read blocks from the hot tier, else ask the cache.

Runs in the training process or a DataLoader worker. A block already in the hot tier is read
straight from its file and verified against its checksum; no byte goes through the cache
actor. Only a miss (or a corrupt copy) costs a call.

When the cache actor dies mid-epoch (B25), the reader reads blocks itself from the warm tier
or S3 at once, so the epoch goes on with every sample exactly once, and about once a second
looks for the restarted cache through the endpoint it publishes in the hot directory
(:class:`NodeLink`); once one answers, the stream is reopened there. A stream the cache forgot
(idle expiry) is reopened.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, TypeVar

from tierload.config.models import TierloadConfig
from tierload.data.blocks import Block
from tierload.data.cold_read import read_cold
from tierload.errors import ChannelLostError, IntegrityError, StreamNotOpenError
from tierload.frames.blockfile import decode_frame, decode_frame_file
from tierload.frames.checksum_key import deployment_key, node_key
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.source import ColdSource
from tierload.stores.local import LocalDirStore
from tierload.stores.registry import open_store
from tierload.wire.api import NodeCacheAPI
from tierload.wire.messages import Endpoint, HotBlock, WireBlock
from tierload.wire.node_client import NodeCacheClient

log = logging.getLogger(__name__)

R = TypeVar("R")


class DirectSource:
    """Reads blocks without the node cache: warm tier first, then cold; caches nothing.

    Args:
        config: The dataset's configuration.
        cold: The dataset's cold location.
        blocks: The dataset's blocks, by key.
    """

    def __init__(self, config: TierloadConfig, cold: ColdLocation, blocks: Mapping[str, Block]) -> None:
        self.blocks = blocks
        self.cold = ColdSource(cold, config.cold)
        self.warm = open_store(config.warm.url, "warm", shared=config.warm.shared) if config.warm.url else None
        self.secret = deployment_key(self.warm.url, config.hot.dir) if self.warm is not None else None

    def read(self, key: str) -> bytes:
        """The raw bytes of ``key``, verified when they come from the warm tier.

        Raises:
            BackendError: The cold tier failed too.
        """
        if self.warm is not None:
            try:
                return decode_frame(key, self.warm.read(key), secret=self.secret)[0]
            except (KeyError, IntegrityError):
                pass
        return read_cold(self.cold, self.blocks[key])


class NodeLink:
    """The channel to this node's cache, found again through the endpoint the cache publishes in
    its hot directory when the cache restarts (new socket key). Pickles to where it points.

    Args:
        endpoint: As returned by the cache's ``endpoint()``.
        identity: The job's identity (:func:`~tierload.stores.cold.identity.identity_of` of its
            cold location): presented with every call that is served a stream's or sample's bytes.
    """

    def __init__(self, endpoint: Endpoint, identity: str = "") -> None:
        self.endpoint = Endpoint.received(endpoint)
        self.identity = identity
        self.client = NodeCacheClient(endpoint.address, endpoint.authkey)
        self.reconnects = 0
        self._last_attempt = 0.0

    def __getstate__(self):
        return {"endpoint": self.endpoint, "identity": self.identity}

    def __setstate__(self, state):
        NodeLink.__init__(self, state["endpoint"], state.get("identity", ""))

    @property
    def hot_dirs(self) -> tuple[str, ...]:
        return self.endpoint.hot_dirs

    def call(self, request: Callable[[NodeCacheAPI], R], *, wait_s: float = 0.0) -> R:
        """``request(cache)`` on the node cache (e.g. ``link.call(lambda cache: cache.stats())``); if
        the cache is gone, look for a restarted one for up to ``wait_s`` seconds and ask it.

        Raises:
            ChannelLostError: No cache answered in time.
        """
        try:
            return request(self.client)
        except ChannelLostError:
            if not self.reconnect(wait_s):
                raise
            return request(self.client)

    def notify(self, request: Callable[[NodeCacheAPI], None]) -> None:
        """A one-way ``request(cache)`` that never fails the training loop (the cache may be restarting)."""
        try:
            request(self.client)
        except ChannelLostError:
            pass

    def reconnect(self, wait_s: float = 0.0) -> bool:
        """Try the endpoint the cache last published (at most once a second unless waiting)."""
        from tierload.wire.endpoint import running_endpoint

        deadline = time.monotonic() + wait_s
        while True:
            now = time.monotonic()
            if wait_s or now - self._last_attempt >= 1.0:
                self._last_attempt = now
                endpoint = running_endpoint(self.hot_dirs[-1])
                if endpoint is not None:
                    client = NodeCacheClient(endpoint.address, endpoint.authkey)
                    try:
                        client.ready()
                    except ChannelLostError:
                        client.close()
                    else:
                        self.client.close()
                        self.client = client
                        # The channel moves; the hot directories are the ones this link started with.
                        self.endpoint = replace(endpoint, hot_dirs=self.endpoint.hot_dirs)
                        self.reconnects += 1
                        log.warning("reconnected to the node cache (pid %s)", endpoint.pid)
                        return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)


class BlockReader:
    """Reads a stream's blocks for one consumer.

    Args:
        link: Channel to the node cache (the last hot directory holds its published endpoint).
        reopen: ``reopen(link)`` opens this consumer's stream again on a restarted node cache.
        direct: Builds a :class:`DirectSource` (used while the cache is unreachable).
    """

    def __init__(self, link: NodeLink, *, reopen: Callable[[NodeLink], None] | None = None,
                 direct: Callable[[], DirectSource] | None = None) -> None:
        self.link = link
        self.levels = [LocalDirStore(Path(path), tier="hot", check=False)  # the node cache checked them
                       for path in link.hot_dirs]
        self.reopen = reopen
        self.direct = direct
        # The deployment's checksum key: the node cache keeps a copy beside its endpoint.
        self.secret = node_key(link.hot_dirs[-1], create=False)
        self.stats = Counter(direct_hits=0, misses=0, reconnects=0, fallback_reads=0, reopened_streams=0)
        self._direct: DirectSource | None = None
        self._lost = False

    def _read_hot(self, key: str, levels) -> tuple[bytes | None, bool]:
        """(raw bytes or None, whether a corrupt copy was found)."""
        for level in levels:
            try:
                return decode_frame_file(key, level.path(key), secret=self.secret), False
            except FileNotFoundError:
                continue
            except IntegrityError:
                log.warning("hot copy of block %s failed its checksum; asking the node cache to refetch", key)
                return None, True
        return None, False

    def hot_path(self, key: str) -> str | None:
        """Path of the file holding ``key`` in the fastest hot level that has it, or None."""
        for level in self.levels:
            path = level.path(key)
            if path.is_file():
                return str(path)
        return None

    def read(self, stream_id: str, consumer: int, position: int, key: str) -> bytes:
        """Return the raw bytes of ``key`` needed at ``position`` of the stream.

        Raises:
            IntegrityError: The hot copy stayed corrupt after two refetches.
            TierloadError: The node cache (or, without it, the cold tier) could not fetch the block.
        """
        raw, corrupt = self._read_hot(key, self.levels)
        if raw is not None:
            self.stats["direct_hits"] += 1
            return raw
        self.stats["misses"] += 1
        for _ in range(3):
            try:
                answer = self.link.client.acquire(stream_id, consumer, position, key if corrupt else None,
                                                  self.link.identity)
            except StreamNotOpenError:
                self._reopen()
                continue
            except ChannelLostError as exc:
                if not self._lost:
                    self._lost = True
                    log.warning("lost the node cache (%s); reading blocks directly until it is back", exc)
                if self.reopen is not None and self.link.reconnect():
                    self.stats["reconnects"] += 1
                    self._reopen()
                    continue
                return self._read_directly(key)
            self._lost = False
            if isinstance(answer, WireBlock):
                return decode_frame(key, WireBlock.received(answer).frame, secret=self.secret)[0]
            level = HotBlock.received(answer).level
            raw, corrupt = self._read_hot(key, self.levels[level:level + 1])
            if raw is not None:
                return raw
            corrupt = True  # announced as in the hot tier, yet missing or bad: have it replaced
        raise IntegrityError("hot copy is still unreadable after refetching it twice", tier="hot", key=key)

    def _reopen(self) -> None:
        if self.reopen is None:
            raise StreamNotOpenError("the node cache forgot this stream and the reader cannot reopen it")
        self.reopen(self.link)
        self.stats["reopened_streams"] += 1

    def _read_directly(self, key: str) -> bytes:
        if self.direct is None:
            raise ChannelLostError("the node cache is gone and this reader cannot read blocks itself")
        if self._direct is None:
            self._direct = self.direct()
        self.stats["fallback_reads"] += 1
        return self._direct.read(key)
