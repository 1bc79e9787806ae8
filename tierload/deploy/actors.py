"""tierload's actors on Ray: their names, their bodies, and typed calls to them.

Actor names include a hash of the tier locations (:func:`deployment_id`), so two deployments
with different directories never share actors. The actors are plain classes made remote at
runtime with fault-tolerance options and a cheap ``ready()`` probe; a call names a method of an
interface of :mod:`tierload.wire.api`, and the node cache actor serves only
:class:`~tierload.wire.api.NodeCacheServiceAPI`.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Concatenate, ParamSpec, TypeVar

import xxhash

from tierload.config.loading import as_config
from tierload.config.models import TierloadConfig
from tierload.coordinator.actor import Coordinator
from tierload.errors import MethodNotAllowedError, ServiceError, TierInUseError
from tierload.wire.api import ACTOR_METHODS, COORDINATOR_METHODS, call_name

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def served(method: Callable[..., Any], served: frozenset[str], by: str) -> str:
    """The name ``method`` travels under, if ``by`` serves it.

    Raises:
        MethodNotAllowedError: ``method`` is not a call of ``by``'s interface.
    """
    name = call_name(method)
    if name not in served:
        raise MethodNotAllowedError(f"{name!r} is not served by {by}; it serves {', '.join(sorted(served))}")
    return name


def actor_call(handle: Any, method: Callable[Concatenate[Any, P], Any], /, *args: P.args, **kwargs: P.kwargs):
    """Send ``method`` (a :class:`~tierload.wire.api.NodeCacheServiceAPI` call) to a node cache actor;
    returns Ray's ``ObjectRef`` of the answer.

    Raises:
        MethodNotAllowedError: ``method`` is not a call of the node cache's interface.
    """
    return handle.call.remote(served(method, ACTOR_METHODS, "the node cache actor"), *args, **kwargs)


COORDINATOR_PREFIX = "tierload-coordinator"
NODE_CACHE_PREFIX = "tierload-cache"


def deployment_id(config: TierloadConfig) -> str:
    """Short id of a deployment: which hot directory and warm tier its actors own."""
    hot = os.path.abspath(os.path.expanduser(config.hot.dir))
    return xxhash.xxh3_64_hexdigest(f"{hot}\x00{config.warm.url or ''}".encode())[:12]


def coordinator_name(config: TierloadConfig) -> str:
    return f"{COORDINATOR_PREFIX}-{deployment_id(config)}"


def node_cache_name(config: TierloadConfig, node_id: str) -> str:
    return f"{NODE_CACHE_PREFIX}-{deployment_id(config)}-{node_id[:16]}"


def _actor_options(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "get_if_exists": True, "lifetime": "detached", "num_cpus": 0,
            "max_concurrency": 64, "max_restarts": 3, "max_task_retries": 2}


class _RayCoordinator(Coordinator):
    """Actor body: a started Coordinator (Ray runs only ``__init__``, also when it restarts the actor)."""

    def __init__(self, config: dict) -> None:
        super().__init__(config)
        self.start()


def _start_coordinator(config: TierloadConfig) -> Any:
    """The deployment's coordinator actor, created if missing; not waited for."""
    import ray

    return ray.remote(_RayCoordinator).options(
        **_actor_options(coordinator_name(config), config.ray.namespace)).remote(config.to_dict())


def _wait_coordinator(handle: Any) -> Any:
    import ray

    try:
        ray.get(handle.ready.remote(), timeout=120)
    except Exception as exc:  # noqa: BLE001
        raise ServiceError(f"the coordinator actor did not start: {exc}") from exc
    return handle


def get_coordinator(config: TierloadConfig):
    """The deployment's coordinator actor, created if missing."""
    return _wait_coordinator(_start_coordinator(config))


class CoordinatorCall:
    """``call(method, *args)`` on the coordinator, found by name (survives its restarts).

    A coordinator removed for good (``ray.kill``, not a crash Ray restarts) is created again
    with the same configuration on the next call; it rebuilds its warm index from the warm
    tier and the nodes resend their residency when they see its new incarnation.
    """

    def __init__(self, name: str, namespace: str, config: dict | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self.config = config

    def _handle(self):
        import ray

        try:
            return ray.get_actor(self.name, namespace=self.namespace)
        except ValueError:  # no actor of that name: it was removed for good
            if self.config is None:
                raise
        handle = get_coordinator(as_config(self.config))  # get_if_exists: one actor however many nodes race
        log.warning("the coordinator %s was gone; started it again with the same configuration", self.name)
        return handle

    def __call__(self, method: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        import ray
        from ray.exceptions import RayActorError

        name = served(method, COORDINATOR_METHODS, "the coordinator")
        try:
            return ray.get(getattr(self._handle(), name).remote(*args, **kwargs), timeout=60)
        except RayActorError:
            # Died under this call (killed, or its node went): one more try on the one found now.
            return ray.get(getattr(self._handle(), name).remote(*args, **kwargs), timeout=60)


class _PeerCall:
    """A :class:`~tierload.wire.api.PeerCaller`: one call on another node's cache actor."""

    def __init__(self, config: dict, namespace: str) -> None:
        self.config = config
        self.namespace = namespace
        self._handles: dict[str, Any] = {}

    def __call__(self, node_id: str, timeout_s: float, method: Callable[Concatenate[Any, P], R], /,
                 *args: P.args, **kwargs: P.kwargs) -> R:
        import ray

        handle = self._handles.get(node_id)
        if handle is None:
            handle = ray.get_actor(node_cache_name(as_config(self.config), node_id), namespace=self.namespace)
            self._handles[node_id] = handle
        try:
            return ray.get(actor_call(handle, method, *args, **kwargs), timeout=timeout_s)
        except Exception:
            self._handles.pop(node_id, None)
            raise


def _object_store_bytes(node_id: str) -> int | None:
    """The size of Ray's object store on node ``node_id`` (bytes), or None if Ray does not say."""
    import ray

    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return int(node.get("Resources", {}).get("object_store_memory", 0)) or None
    return None


class _RayNodeCache:
    """Actor body: a NodeCache that knows its Ray node and reaches the coordinator and peers by name."""

    def __init__(self, config: dict, coordinator: str | None, namespace: str) -> None:
        import ray

        from tierload.node.node_cache import NodeCache

        context = ray.get_runtime_context()
        node_id = context.get_node_id()
        self.where = f"node cache actor on node {node_id}"
        self.refused: TierInUseError | None = None
        store_bytes = _object_store_bytes(node_id)
        fraction = as_config(config).hot.peer_max_store_fraction
        try:
            self.cache = NodeCache(config, node_id=node_id,
                                   coordinator_call=(CoordinatorCall(coordinator, namespace, config)
                                                     if coordinator is not None else None),
                                   peer_call=_PeerCall(config, namespace), ray_address=context.gcs_address,
                                   peer_max_bytes=int(store_bytes * fraction) if store_bytes else None).start()
        except TierInUseError as exc:
            # Said by refusal() rather than raised: Ray would restart the actor (max_restarts) in vain.
            self.refused = exc

    def ready(self) -> bool:
        return True

    def refusal(self) -> TierInUseError | None:
        """Why this actor has no node cache: another job owns the hot directory; None if it has one."""
        return self.refused

    def call(self, method: str, *args, **kwargs):
        """Invoke a NodeCache method: the local channel's, plus what peers and the CLI need.

        Raises:
            MethodNotAllowedError: ``method`` is not a call of
                :class:`~tierload.wire.api.NodeCacheServiceAPI`.
            TierInUseError: This actor has no node cache: another job owns the hot directory.
        """
        if method not in ACTOR_METHODS:
            raise MethodNotAllowedError(f"{method!r} is not served by the node cache actor; it serves "
                                        f"{', '.join(sorted(ACTOR_METHODS))}", where=self.where)
        if self.refused is not None:
            raise self.refused
        return getattr(self.cache, method)(*args, **kwargs)


def get_node_cache(config: TierloadConfig, node_id: str | None = None, *, with_coordinator: bool = True):
    """The cache actor of ``node_id`` (default: this process's node), created and pinned if missing.

    Args:
        config: The deployment's configuration.
        node_id: The Ray node the actor is pinned to; None: this process's node.
        with_coordinator: False: a cache created here runs alone, without the deployment's
            coordinator (no warm tier, no peers: :func:`~tierload.deploy.runtime.needs_coordinator`).

    Raises:
        ServiceError: An actor did not start.
        TierInUseError: Another job with another configuration owns the hot directory.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node_id = node_id or ray.get_runtime_context().get_node_id()
    # Both actors' worker processes start at once (each is an interpreter importing Ray and tierload,
    # about a second apiece): the node cache asks the coordinator for the checksum key when it is up.
    coordinator = _start_coordinator(config) if with_coordinator else None
    options = _actor_options(node_cache_name(config, node_id), config.ray.namespace)
    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    handle: Any = ray.remote(_RayNodeCache).options(**options).remote(
        config.to_dict(), coordinator_name(config) if with_coordinator else None, config.ray.namespace)
    if coordinator is not None:
        _wait_coordinator(coordinator)
    try:
        ray.get(handle.ready.remote(), timeout=120)
        refused = ray.get(handle.refusal.remote(), timeout=60)
    except Exception as exc:  # noqa: BLE001
        raise ServiceError(f"the node cache actor on node {node_id} did not start: {exc}") from exc
    if refused is not None:
        ray.kill(handle, no_restart=True)  # frees its name for a later start, once the directory is free
        raise refused
    return handle
