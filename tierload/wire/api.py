"""The calls that cross a process boundary, as typed interfaces: one method per call.

A caller names the interface's method itself (``client.acquire(...)``, or
``call(CoordinatorAPI.sync, node_id, report)``), never a method name in a string, so mypy checks
each call's arguments and answer end to end, and a reader follows a block from the consumer into
the node cache with "go to definition". A server's allow-list is derived from the interface
(:func:`api_methods`): what it serves is exactly what the interface declares.

    NodeCacheAPI         consumers on the node -> node cache   (the local channel; NodeCacheClient)
    NodeCacheServiceAPI  peers, the CLI, the deployment -> node cache   (Ray: NodeCacheAPI and more)
    CoordinatorAPI       node caches, `tierload warm` -> coordinator   (Ray)

Messages in and out are the frozen, versioned dataclasses of :mod:`tierload.wire.messages`.
"""

from __future__ import annotations

from typing import Any, Callable, Concatenate, ParamSpec, Protocol, TypeVar

from tierload.errors import MethodNotAllowedError
from tierload.wire.messages import (
    DatasetRegistration,
    Endpoint,
    HotBlock,
    LoopReport,
    MemberFrame,
    SampleRead,
    SeededStreamPlan,
    StreamPlan,
    SyncAnswer,
    SyncReport,
    WireBlock,
)
from tierload.wire.stats import CoordinatorStats, NodeStats, NodeStatus, StreamStats

P = ParamSpec("P")
R = TypeVar("R")


def api_methods(interface: type) -> frozenset[str]:
    """The names of the calls ``interface`` declares (its public methods, inherited ones included):
    a server's allow-list."""
    return frozenset(name for klass in interface.__mro__ if klass not in (object, Protocol)
                     for name, member in vars(klass).items() if callable(member) and not name.startswith("_"))


def call_name(method: Callable[..., Any]) -> str:
    """The name a call travels under: the interface method's own name."""
    return method.__name__


class Caller(Protocol):
    """Sends one call of an interface to a server and returns its answer (re-raising its error)."""

    def __call__(self, method: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs) -> R: ...


class LocalCaller:
    """A :class:`Caller` for a server in this process: calls ``target``'s implementation of the
    interface method (never a method the interface does not declare).

    Args:
        target: The server object (it implements ``interface``).
        interface: The interface it serves, e.g. :class:`CoordinatorAPI`.
    """

    def __init__(self, target: Any, interface: type) -> None:
        self.target = target
        self.methods = api_methods(interface)

    def __call__(self, method: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        name = call_name(method)
        if name not in self.methods:
            raise MethodNotAllowedError(f"{name!r} is not a call of {type(self.target).__name__}'s interface")
        return getattr(self.target, name)(*args, **kwargs)


class PeerCaller(Protocol):
    """Sends one call of :class:`NodeCacheServiceAPI` to the node cache of another node, waiting at
    most ``timeout_s`` seconds for its answer."""

    def __call__(self, node_id: str, timeout_s: float, method: Callable[Concatenate[Any, P], R], /,
                 *args: P.args, **kwargs: P.kwargs) -> R: ...


class NodeCacheAPI(Protocol):
    """What a consumer on the node (a training process, a DataLoader worker) may ask its node cache,
    over the local channel. Implemented by :class:`tierload.node.node_cache.NodeCache`; called
    through :class:`tierload.wire.node_client.NodeCacheClient`."""

    def ready(self) -> bool:
        """Cheap liveness probe."""
        ...

    def endpoint(self) -> Endpoint:
        """Where consumers on this node find the cache: channel address, key and hot directories."""
        ...

    def has_dataset(self, dataset_id: str) -> bool:
        """Whether the dataset ``dataset_id`` is registered."""
        ...

    def register_dataset(self, registration: DatasetRegistration) -> bool:
        """Tell the cache the blocks of a dataset; False: send the blocks instead of a manifest file."""
        ...

    def open_stream(self, stream_id: str, consumer: int, num_consumers: int,
                    plan: StreamPlan | SeededStreamPlan | None = None, identity: str = "") -> bool:
        """Join (or create, with ``plan``) the stream of a rank's epoch; False: call again with the plan.
        A join presents the job's ``identity`` (a plan carries its own): another job's stream is refused."""
        ...

    def progress(self, stream_id: str, consumer: int, position: int, identity: str = "") -> None:
        """``consumer`` consumed every position before ``position`` (sent one-way; the stream's own job only)."""
        ...

    def close_consumer(self, stream_id: str, consumer: int, identity: str = "") -> None:
        """``consumer`` is done with the stream (sent one-way; the stream's own job only)."""
        ...

    def acquire(self, stream_id: str, consumer: int, position: int,
                corrupt_key: str | None = None, identity: str = "") -> HotBlock | WireBlock:
        """Make the block at ``position`` available: in a hot level, or its frame on the wire.
        Only for the job (``identity``) the stream was opened for."""
        ...

    def invalidate(self, keys: list[str]) -> int:
        """Drop ``keys`` from this node's tiers and the warm tier; the number of copies dropped."""
        ...

    def read_sample(self, request: SampleRead) -> HotBlock | WireBlock | MemberFrame:
        """One sample's bytes outside any stream (``ds[i]``), through hot, peer, warm, then cold:
        the hot level holding its block, the block's frame, or (a pack member not cached
        anywhere) the member's bytes alone, read by one ranged request."""
        ...

    def record_trace(self, enabled: bool) -> list[tuple[str, int, int]]:
        """Start (or stop, returning it) recording the access trace: ``(key, size_bytes, hit_level)``."""
        ...

    def sync_now(self) -> None:
        """Send what this node learned to the coordinator now."""
        ...

    def stats(self) -> NodeStats:
        """The node cache's counters (hot levels, fetches, wire, coordinator)."""
        ...

    def stream_stats(self, dataset_id: str | None = None) -> list[StreamStats]:
        """Per open or recently closed stream: prefetch lead, waits, hits."""
        ...

    def report_loop(self, report: LoopReport) -> None:
        """A rank's stall figures since its last report, from a job without Ray of its own (the
        cache exports them as that rank's metrics)."""
        ...

    def status(self) -> NodeStatus:
        """What ``tierload status`` shows for this node."""
        ...


class NodeCacheServiceAPI(NodeCacheAPI, Protocol):
    """What tierload's own actors and the CLI may ask a node cache through Ray: the channel's calls,
    serving a peer, and running the deployment."""

    def read_block(self, key: str) -> bytes | None:
        """The frame of ``key`` from this node's hot tier for a peer, or None when it is not held."""
        ...

    def set_policy(self, policy: dict) -> dict:
        """Apply a tier policy (``tierload policy set``); the effective one."""
        ...

    def close(self) -> None:
        """Stop serving; the tier files stay."""
        ...


class CoordinatorAPI(Protocol):
    """What node caches and ``tierload warm`` may ask the coordinator through Ray.
    Implemented by :class:`tierload.coordinator.actor.Coordinator`."""

    def ready(self) -> bool:
        """Cheap liveness probe."""
        ...

    def checksum_key(self, offered: bytes) -> bytes:
        """The deployment's checksum key: the one in force, or ``offered`` when none is yet."""
        ...

    def set_policy(self, policy: dict) -> dict:
        """Apply a warm-tier policy; the effective one."""
        ...

    def sync(self, node_id: str, report: SyncReport) -> SyncAnswer:
        """One node's batched report (counts, residency, warm candidates) and what it should know."""
        ...

    def commit(self, committed: list[str], aborted: list[str]) -> None:
        """Warm writes the node finished or gave up."""
        ...

    def invalidate(self, keys: list[str]) -> int:
        """Drop ``keys`` from the warm tier and the holder map; the number of copies dropped."""
        ...

    def holders(self, keys: list[str]) -> dict[str, list[str]]:
        """The nodes that hold each of ``keys`` in their hot tier."""
        ...

    def forget_node(self, node_id: str) -> int:
        """Remove a lost node from the holder map; the number of entries removed."""
        ...

    def stats(self) -> CoordinatorStats:
        """The warm tier's and the cluster's counters."""
        ...


CHANNEL_METHODS = api_methods(NodeCacheAPI)
ACTOR_METHODS = api_methods(NodeCacheServiceAPI)
COORDINATOR_METHODS = api_methods(CoordinatorAPI)
