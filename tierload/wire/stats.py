"""The figures a node cache and the coordinator report across a process boundary: frozen, versioned.

    NodeStats         node cache -> consumer, CLI   counters, per-level usage, streams
    StreamStats       node cache -> consumer        one stream's progress and counters
    LevelStats        (inside NodeStats)            one hot level's usage and moves
    WarmStats         (inside CoordinatorStats)     the warm tier's usage
    CoordinatorStats  coordinator -> node cache, CLI  the warm tier and the holder map
    NodeStatus        node cache -> CLI             what ``tierload status`` shows of a node

Each class is built from the producer's own fields by name, so a producer that adds or loses a
figure fails at the producer (``TypeError``) instead of handing a consumer a dict with a key
missing. :meth:`to_dict` gives the documented plain shape (``TieredDataset.cache_stats()``,
``tierload status --json``, the metrics catalog), which stays what it was when stats were dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tierload.wire.messages import Message


@dataclass(frozen=True)
class WarmStats(Message):
    """A tier index's usage (:meth:`tierload.policies.tierindex.TierIndex.stats`) and its directory's health.

    Attributes:
        tier: The level's name (``ram``, ``nvme``, ``warm``).
        capacity_bytes, used_bytes: Budget and use, in bytes.
        blocks, reserved_blocks, pinned_blocks: Resident blocks; blocks with space reserved for a
            write in flight; blocks that may not be evicted now.
        evictions, refusals, admissions: Blocks evicted, refused admission and admitted so far.
        policy: The eviction policy's name.
        writable: Whether the level's directory takes writes (as far as known).
        write_failures: Writes that failed so far.
    """

    tier: str
    capacity_bytes: int
    used_bytes: int
    blocks: int
    reserved_blocks: int
    pinned_blocks: int
    evictions: int
    refusals: int
    admissions: int
    policy: str
    writable: bool
    write_failures: int
    version: int = Message.VERSION

    def to_dict(self) -> dict[str, Any]:
        """The plain shape, without ``version``."""
        return _plain(self)


@dataclass(frozen=True)
class LevelStats(WarmStats):
    """One hot level: :class:`WarmStats`, and the blocks moved into it.

    Attributes:
        promotions: Blocks moved up into this level.
        demotions: Blocks moved down out of it.
        written_bytes: Bytes written to it.
    """

    promotions: int = 0
    demotions: int = 0
    written_bytes: int = 0


@dataclass(frozen=True)
class StreamStats(Message):
    """One stream (one rank's iteration of an epoch): its progress and its counters.

    Attributes:
        stream_id, dataset_id, epoch: Which stream.
        cursor: Positions consumed so far; ``consume_len``: positions it consumes in all.
        finished: Whether it was closed.
        lead_blocks, lead_positions: How far prefetching is ahead of the consumers.
        counters: ``{name: count}`` over :data:`tierload.node.stats.COUNTERS`.
    """

    stream_id: str
    dataset_id: str
    epoch: int
    cursor: int
    consume_len: int
    finished: bool
    lead_blocks: int
    lead_positions: int
    counters: Mapping[str, int] = field(default_factory=dict)
    version: int = Message.VERSION

    def to_dict(self) -> dict[str, Any]:
        """The plain row: the progress fields and the counters side by side, without ``version``."""
        row = {item.name: getattr(self, item.name) for item in fields(self) if item.name not in ("counters", "version")}
        return {**row, **self.counters}


@dataclass(frozen=True)
class NodeStats(Message):
    """What a node cache reports of itself (:meth:`tierload.node.node_cache.NodeCache.stats`).

    Attributes:
        node_id: The node's id.
        counters: ``{name: count}`` over :data:`tierload.node.stats.COUNTERS`, since the cache started.
        levels: The hot levels, fastest first.
        inflight: Fetches in flight now.
        threads: Threads in the cache's process.
        pid: The cache's process id.
        staged_bytes: Bytes fetched and held in memory, not yet written to a level.
        streams: The open streams.
        finished_streams: The last streams closed.
        sync: The coordinator link's counters (warm writes, syncs), or None without a coordinator.
    """

    node_id: str
    counters: Mapping[str, int]
    levels: tuple[LevelStats, ...]
    inflight: int
    threads: int
    pid: int
    staged_bytes: int
    streams: tuple[StreamStats, ...]
    finished_streams: tuple[StreamStats, ...]
    sync: Mapping[str, int] | None = None
    version: int = Message.VERSION

    def to_dict(self) -> dict[str, Any]:
        """The plain shape of ``TieredDataset.cache_stats()`` (``sync`` only when there is a coordinator)."""
        plain = {"node_id": self.node_id, "counters": dict(self.counters),
                 "levels": [level.to_dict() for level in self.levels], "inflight": self.inflight,
                 "threads": self.threads, "pid": self.pid, "staged_bytes": self.staged_bytes,
                 "streams": [row.to_dict() for row in self.streams],
                 "finished_streams": [row.to_dict() for row in self.finished_streams]}
        if self.sync is not None:
            plain["sync"] = dict(self.sync)
        return plain


@dataclass(frozen=True)
class CoordinatorStats(Message):
    """What the coordinator reports (:meth:`tierload.coordinator.actor.Coordinator.stats`).

    Attributes:
        warm: The warm tier's usage, or None when the deployment has no warm tier.
        nodes: ``{node_id: blocks it holds in its hot tier}`` for the nodes seen.
        forgotten_nodes: Nodes removed from the holder map as lost, sorted.
        accesses: Block accesses reported by the nodes (decayed counts, hence a float).
        tracked_blocks: Blocks with an access count.
        held_blocks: Blocks some node holds.
        clock: The decay clock (epochs, or seconds with ``policy.decay.unit = "second"``).
        incarnation: Which start of the coordinator this is.
    """

    warm: WarmStats | None
    nodes: Mapping[str, int]
    forgotten_nodes: tuple[str, ...]
    accesses: float
    tracked_blocks: int
    held_blocks: int
    clock: float
    incarnation: str
    version: int = Message.VERSION

    def to_dict(self) -> dict[str, Any]:
        """The plain shape, without ``version``."""
        plain = _plain(self)
        plain["warm"] = None if self.warm is None else self.warm.to_dict()
        plain["nodes"], plain["forgotten_nodes"] = dict(self.nodes), list(self.forgotten_nodes)
        return plain


@dataclass(frozen=True)
class NodeStatus(Message):
    """What ``tierload status`` shows of one node: its stats and the coordinator's, or None when
    there is no coordinator or it did not answer."""

    node: NodeStats
    coordinator: CoordinatorStats | None
    version: int = Message.VERSION

    def to_dict(self) -> dict[str, Any]:
        """``{"node": ..., "coordinator": ... or None}`` in plain shapes."""
        return {"node": self.node.to_dict(),
                "coordinator": None if self.coordinator is None else self.coordinator.to_dict()}


def _plain(message: Message) -> dict[str, Any]:
    plain = asdict(message)
    plain.pop("version", None)
    return plain
