"""Finding or starting Ray, and the tierload actors on it.

With no cluster configured (``ray.address: null`` and no ``RAY_ADDRESS``), tierload starts
its own local Ray, listening on 127.0.0.1 only (GCS, raylet, object manager, workers and
actors, agents), without the dashboard; ``address=`` joins an existing cluster, unchanged.
The actors are named and detached: jobs come and go, the tiers (and the actors that own
them) stay until ``tierload stop``; a job finds them by name, and a node cache finds the
coordinator by name on every call, so it reconnects after a restart. Actor names include a
hash of the tier locations, so two deployments with different directories never share actors.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Callable, Concatenate, Iterator, ParamSpec, TypeVar

import xxhash

from tierload.config.models import TierloadConfig
from tierload.coordinator.actor import Coordinator
from tierload.errors import MethodNotAllowedError, ServiceError, TierInUseError
from tierload.wire.api import ACTOR_METHODS, COORDINATOR_METHODS, CoordinatorAPI, NodeCacheServiceAPI, call_name

if TYPE_CHECKING:
    from tierload.wire.messages import Endpoint

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")



def _served(method: Callable[..., Any], served: frozenset[str], by: str) -> str:
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
    return handle.call.remote(_served(method, ACTOR_METHODS, "the node cache actor"), *args, **kwargs)


COORDINATOR_PREFIX = "tierload-coordinator"
NODE_CACHE_PREFIX = "tierload-cache"


def ray_connected() -> bool:
    """Whether this process is connected to Ray now (never imports Ray)."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(ray.is_initialized())


def ensure_ray(config: TierloadConfig, *, start: bool = True) -> None:
    """Connect to Ray if this process is not connected yet.

    A configured address (``ray.address`` or ``RAY_ADDRESS``) is joined only if something
    answers there (a bounded check, :data:`~tierload.deploy.service_probe.CONNECT_TIMEOUT_S`); a
    loopback address is joined as loopback, so Ray does not swap 127.0.0.1 for this machine's
    address (a Ray that listens on 127.0.0.1 only would then never answer).

    Args:
        config: The deployment's configuration (``ray`` section).
        start: False: never connect or start Ray here (a background thread's call: Ray that is
            not connected now was shut down on purpose, by the user or at exit).

    Raises:
        ServiceError: Ray could not be started or reached, nothing answers at the address, or
            ``start`` is False and this process is not connected to Ray.
    """
    import ray

    if ray.is_initialized():
        return
    if not start:
        raise ServiceError("Ray is not connected in this process (it was shut down); tierload does not start it "
                           "again by itself: build a new TieredDataset to start it")
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        join_ray(address, config.ray.namespace)
        return
    try:
        # address="local" starts a fresh cluster even if a stale /tmp/ray session exists.
        with _loopback_node():
            ray.init(address="local", namespace=config.ray.namespace, include_dashboard=False,
                     _node_ip_address="127.0.0.1", num_cpus=config.ray.num_cpus,
                     object_store_memory=config.ray.object_store_memory_bytes, log_to_driver=True,
                     configure_logging=False)
        # Registered after ray.init's own exit hook, so it runs first (atexit is LIFO).
        atexit.register(_close_node_caches, config.ray.namespace)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types; say what we tried
        raise ServiceError(f"cannot start a local Ray: {exc}") from exc


def join_ray(address: str, namespace: str, log_to_driver: bool = True) -> None:
    """Join the running Ray cluster at ``address`` (``auto``, ``host:port`` or ``ray://``).

    Raises:
        ServiceError: Nothing answers at ``address`` (said within about a second), or Ray
            could not join it.
    """
    import ray

    from tierload.deploy.service_probe import is_loopback, ray_cluster_answers

    if not ray_cluster_answers(address):
        raise ServiceError(f"no Ray cluster answers at {address!r}: start it (`ray start --head`) or pass the "
                           "address of a running one (--address / ray.address / RAY_ADDRESS)")
    loopback = is_loopback(address)
    extra: dict[str, Any] = {"_node_ip_address": "127.0.0.1"} if loopback else {}
    if loopback:
        _local_token_auth()
    try:
        with _loopback_node() if loopback else contextlib.nullcontext():
            ray.init(address=address, namespace=namespace, log_to_driver=log_to_driver, configure_logging=False,
                     **extra)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types; say what we tried
        raise ServiceError(f"cannot join Ray at {address}: {exc}") from exc


def _close_node_caches(namespace: str) -> None:
    """At exit of the process that started the local Ray: close its node caches before Ray
    ends them, so each removes its socket and endpoint file (a killed one leaves them for the
    next cache on the directory to clear)."""
    import ray

    if not ray.is_initialized():
        return
    try:
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if isinstance(a, dict) and a.get("namespace") == namespace
                 and str(a.get("name", "")).startswith(NODE_CACHE_PREFIX)]
        pending = [actor_call(ray.get_actor(name, namespace=namespace), NodeCacheServiceAPI.close) for name in names]
        ray.get(pending, timeout=10)
    except Exception:  # noqa: BLE001 - best effort at exit; leftovers are cleared by the next cache
        log.debug("could not close the node caches at exit", exc_info=True)


def _local_token_auth() -> None:
    """Send this user's Ray token (``~/.ray/auth_token``) when joining a Ray on this machine.

    A local Ray (tierload's own, or ``ray start``) enables token authentication by default
    (Ray 2.5x); ``ray.init`` sends the token to a cluster it found itself (``address="auto"``)
    but not to an explicit address, which the GCS then refuses ("Authentication token is
    missing") until the wait runs out. A loopback address is this machine's, so it is treated as
    ``auto`` is. A Ray without token authentication has nothing to do here.
    """
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


@contextlib.contextmanager
def _loopback_node() -> Iterator[None]:
    """Keep a local Ray's node IP 127.0.0.1 while it starts.

    On Linux, ``ray.init(_node_ip_address="127.0.0.1")`` alone is not enough: Ray replaces a
    loopback node IP by the machine's address when multi-node clusters are enabled
    (``resolve_ip_for_localhost`` in ``ray/_private/services.py``, Ray 2.x), and its GCS,
    raylet and workers then listen on every interface. With cluster mode off for the start
    (``ray_constants.ENABLE_RAY_CLUSTER``, the switch behind
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``) the node IP stays loopback and every Ray server binds
    it; a single-node Ray needs nothing else. tests/test_loopback.py lists the listening
    sockets, so a Ray release that moves the switch fails it.
    """
    try:
        from ray._private import ray_constants
    except ImportError:  # a Ray without the switch: the test says whether it still binds loopback
        yield
        return
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


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


def get_coordinator(config: TierloadConfig):
    """The deployment's coordinator actor, created if missing."""
    import ray

    handle: Any = ray.remote(_RayCoordinator).options(
        **_actor_options(coordinator_name(config), config.ray.namespace)).remote(config.to_dict())
    try:
        ray.get(handle.ready.remote(), timeout=120)
    except Exception as exc:  # noqa: BLE001
        raise ServiceError(f"the coordinator actor did not start: {exc}") from exc
    return handle


class _CoordinatorCall:
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

        from tierload.config.loading import as_config

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

        name = _served(method, COORDINATOR_METHODS, "the coordinator")
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

        from tierload.config.loading import as_config

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

    def __init__(self, config: dict, coordinator: str, namespace: str) -> None:
        import ray

        from tierload.config.loading import as_config
        from tierload.node.node_cache import NodeCache

        context = ray.get_runtime_context()
        node_id = context.get_node_id()
        self.where = f"node cache actor on node {node_id}"
        self.refused: TierInUseError | None = None
        store_bytes = _object_store_bytes(node_id)
        fraction = as_config(config).hot.peer_max_store_fraction
        try:
            self.cache = NodeCache(config, node_id=node_id,
                                   coordinator_call=_CoordinatorCall(coordinator, namespace, config),
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


def get_node_cache(config: TierloadConfig, node_id: str | None = None):
    """The cache actor of ``node_id`` (default: this process's node), created and pinned if missing."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node_id = node_id or ray.get_runtime_context().get_node_id()
    get_coordinator(config)
    options = _actor_options(node_cache_name(config, node_id), config.ray.namespace)
    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    handle: Any = ray.remote(_RayNodeCache).options(**options).remote(
        config.to_dict(), coordinator_name(config), config.ray.namespace)
    try:
        ray.get(handle.ready.remote(), timeout=120)
        refused = ray.get(handle.refusal.remote(), timeout=60)
    except Exception as exc:  # noqa: BLE001
        raise ServiceError(f"the node cache actor on node {node_id} did not start: {exc}") from exc
    if refused is not None:
        ray.kill(handle, no_restart=True)  # frees its name for a later start, once the directory is free
        raise refused
    return handle


def node_endpoint(config: TierloadConfig, start_ray: bool = True) -> Endpoint:
    """How consumers on this node reach its cache: the live owner of the hot directory when
    this job may share it (:mod:`tierload.node.ownership`), else this deployment's cache
    actor, started if missing (and Ray with it, unless ``start_ray`` is False).

    Raises:
        TierInUseError: Another job with another configuration owns the hot directory.
        ServiceError: Ray or the cache actor could not be started, or ``start_ray`` is False
            and this process is not connected to Ray.
    """
    import ray

    from tierload.node.ownership import join_owner

    if "{node}" in config.hot.dir:
        ensure_ray(config, start=start_ray)  # the directory names this node
        hot_dir = config.hot.dir.replace("{node}", ray.get_runtime_context().get_node_id()[:16])
    else:
        hot_dir = config.hot.dir
    joined = join_owner(config, hot_dir)
    if joined is not None:
        return joined
    ensure_ray(config, start=start_ray)
    try:
        handle = get_node_cache(config)
    except TierInUseError:
        joined = join_owner(config, hot_dir)  # another job became the owner meanwhile
        if joined is None:
            raise
        return joined
    return ray.get(actor_call(handle, NodeCacheServiceAPI.endpoint))


def stop_actors(config: TierloadConfig) -> int:
    """Close and kill this deployment's node caches and coordinator; returns how many were stopped.

    Hot and warm tier files stay on disk for the next start.
    """
    import ray

    from tierload.deploy.keeper import stop_keepers

    stop_keepers(deployment_id(config))  # or this process would start them again
    stopped = 0
    prefix = node_cache_name(config, "")
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if isinstance(a, dict) and a.get("namespace") == config.ray.namespace]
    for name in sorted(names, key=lambda n: n.startswith(COORDINATOR_PREFIX)):
        if not (name.startswith(prefix) or name == coordinator_name(config)):
            continue
        try:
            handle = ray.get_actor(name, namespace=config.ray.namespace)
            if name.startswith(prefix):
                ray.get(actor_call(handle, NodeCacheServiceAPI.close), timeout=30)
            ray.kill(handle, no_restart=True)
            stopped += 1
        except Exception:  # noqa: BLE001 - already gone
            log.debug("actor %s was already gone", name, exc_info=True)
    return stopped


def apply_policy(config: TierloadConfig, policy) -> dict[str, Any]:
    """Apply a new ``policy:`` section to a running deployment's actors, without restarting jobs.

    Every node cache and the coordinator validate it again and switch from their next admission
    decision on. An invalid policy is refused by the first actor and changes nothing.

    Args:
        config: The deployment's configuration (locates its actors).
        policy: A :class:`tierload.config.models.PolicyConfig` or its dict form.

    Returns:
        ``{"nodes": [node cache names updated], "coordinator": bool, "policy": effective policy}``.

    Raises:
        ConfigError: The policy is invalid (nothing was changed).
        ServiceError: No tierload actors are running for this configuration.
    """
    import ray

    from tierload.config.loading import as_config
    from tierload.config.models import PolicyConfig

    ensure_ray(config)
    policy_dict = policy.model_dump(mode="json") if isinstance(policy, PolicyConfig) else dict(policy)
    as_config({**config.to_dict(), "policy": policy_dict})  # refuse before touching any actor
    prefix = node_cache_name(config, "")
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if isinstance(a, dict) and a.get("namespace") == config.ray.namespace)
    caches = [name for name in names if name.startswith(prefix)]
    has_coordinator = coordinator_name(config) in names
    if not caches and not has_coordinator:
        raise ServiceError("no tierload actors run for this configuration (same hot.dir and warm.url as the "
                           "service?); start them with `tierload serve`")
    effective: Any = None
    for name in caches:
        handle = ray.get_actor(name, namespace=config.ray.namespace)
        effective = ray.get(actor_call(handle, NodeCacheServiceAPI.set_policy, policy_dict), timeout=60)
    if has_coordinator:
        handle = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
        effective = ray.get(getattr(handle, _served(CoordinatorAPI.set_policy, COORDINATOR_METHODS,
                                                    "the coordinator")).remote(policy_dict), timeout=60)
    return {"nodes": caches, "coordinator": has_coordinator, "policy": effective}
