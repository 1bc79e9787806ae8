"""A consumer's typed client of its node cache: one method per call of
:class:`~tierload.wire.api.NodeCacheAPI`, over the local channel."""

from __future__ import annotations

from tierload.wire.api import NodeCacheAPI
from tierload.wire.channel import ChannelClient
from tierload.wire.messages import (
    DatasetRegistration,
    Endpoint,
    HotBlock,
    LoopReport,
    MemberFrame,
    SampleRead,
    SeededStreamPlan,
    StreamPlan,
    WireBlock,
)
from tierload.wire.stats import NodeStats, NodeStatus, StreamStats


class NodeCacheClient(NodeCacheAPI):
    """Calls its node cache's :class:`~tierload.wire.api.NodeCacheAPI` over the local channel.

    Each method sends one call and returns the cache's answer; the cache's errors are re-raised
    here (a lost cache is :class:`~tierload.errors.ChannelLostError`). Pickles to its address and
    key; each process opens its own connection.

    Args:
        address: The cache's channel (Unix socket path or abstract name).
        authkey: The channel's secret.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self.channel = ChannelClient(address, authkey)

    def close(self) -> None:
        """Hang up this process's connection."""
        self.channel.close()

    def ready(self) -> bool:
        return self.channel.call(NodeCacheAPI.ready)

    def endpoint(self) -> Endpoint:
        return self.channel.call(NodeCacheAPI.endpoint)

    def has_dataset(self, dataset_id: str) -> bool:
        return self.channel.call(NodeCacheAPI.has_dataset, dataset_id)

    def register_dataset(self, registration: DatasetRegistration) -> bool:
        return self.channel.call(NodeCacheAPI.register_dataset, registration)

    def open_stream(self, stream_id: str, consumer: int, num_consumers: int,
                    plan: StreamPlan | SeededStreamPlan | None = None, identity: str = "") -> bool:
        return self.channel.call(NodeCacheAPI.open_stream, stream_id, consumer, num_consumers, plan, identity)

    def progress(self, stream_id: str, consumer: int, position: int, identity: str = "") -> None:
        """Sent one-way: the training loop never waits for it."""
        self.channel.notify(NodeCacheAPI.progress, stream_id, consumer, position, identity)

    def close_consumer(self, stream_id: str, consumer: int, identity: str = "") -> None:
        """Sent one-way: the training loop never waits for it."""
        self.channel.notify(NodeCacheAPI.close_consumer, stream_id, consumer, identity)

    def acquire(self, stream_id: str, consumer: int, position: int,
                corrupt_key: str | None = None, identity: str = "") -> HotBlock | WireBlock:
        return self.channel.call(NodeCacheAPI.acquire, stream_id, consumer, position, corrupt_key, identity)

    def invalidate(self, keys: list[str]) -> int:
        return self.channel.call(NodeCacheAPI.invalidate, keys)

    def read_sample(self, request: SampleRead) -> HotBlock | WireBlock | MemberFrame:
        return self.channel.call(NodeCacheAPI.read_sample, request)

    def record_trace(self, enabled: bool) -> list[tuple[str, int, int]]:
        return self.channel.call(NodeCacheAPI.record_trace, enabled)

    def sync_now(self) -> None:
        self.channel.call(NodeCacheAPI.sync_now)

    def stats(self) -> NodeStats:
        return self.channel.call(NodeCacheAPI.stats)

    def stream_stats(self, dataset_id: str | None = None) -> list[StreamStats]:
        return self.channel.call(NodeCacheAPI.stream_stats, dataset_id)

    def status(self) -> NodeStatus:
        return self.channel.call(NodeCacheAPI.status)

    def report_loop(self, report: LoopReport) -> None:
        self.channel.call(NodeCacheAPI.report_loop, report)
