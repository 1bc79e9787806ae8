"""Finding or starting Ray, and reaching this node's cache and the deployment's actors on it
(the actors themselves: :mod:`tierload.deploy.actors`).

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
from typing import TYPE_CHECKING, Any, Iterator, ParamSpec, TypeVar

from tierload.config.loading import as_config
from tierload.config.models import PolicyConfig, TierloadConfig
from tierload.deploy.actors import (
    COORDINATOR_PREFIX,
    NODE_CACHE_PREFIX,
    actor_call,
    coordinator_name,
    deployment_id,
    get_node_cache,
    node_cache_name,
    served,
)
from tierload.deploy.local_ray import lean_local_ray, local_ray_system_config, start_retrying_a_node_that_timed_out
from tierload.errors import ServiceError, TierInUseError
from tierload.ray_presence import ray_connected
from tierload.wire.api import COORDINATOR_METHODS, CoordinatorAPI, NodeCacheServiceAPI

if TYPE_CHECKING:
    from tierload.wire.messages import Endpoint

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# The node id of the Ray that ensure_ray started in this process (one node on loopback: no other
# node can join it, no peer can ask this node's cache for a block); compared with the Ray connected
# now, so a Ray the user starts after a ray.shutdown() is not taken for it.
_own_local_node: str | None = None


def ensure_ray(config: TierloadConfig, *, start: bool = True, log_to_driver: bool = True) -> None:
    """Connect to Ray if this process is not connected yet.

    A configured address (``ray.address`` or ``RAY_ADDRESS``) is joined only if something
    answers there (a bounded check, :data:`~tierload.deploy.service_probe.CONNECT_TIMEOUT_S`); a
    loopback address is joined as loopback, so Ray does not swap 127.0.0.1 for this machine's
    address (a Ray that listens on 127.0.0.1 only would then never answer).

    Args:
        config: The deployment's configuration (``ray`` section).
        start: False: never connect or start Ray here (a background thread's call: Ray that is
            not connected now was shut down on purpose, by the user or at exit).
        log_to_driver: False: a local Ray started here sends its workers' output nowhere and
            starts no log monitor (for a process that reads none of it).

    Raises:
        ServiceError: Ray could not be started or reached, nothing answers at the address, or
            ``start`` is False and this process is not connected to Ray.
    """
    import ray

    global _own_local_node
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
        # Sized to what tierload uses (no API server, no idle workers; no metrics agent unless metrics
        # are asked for): tierload.deploy.local_ray.
        metrics = config.metrics.enabled

        def start_local_node() -> None:
            with _loopback_node(), lean_local_ray(metrics, log_to_driver):
                ray.init(address="local", namespace=config.ray.namespace, include_dashboard=False,
                         _node_ip_address="127.0.0.1", num_cpus=config.ray.num_cpus,
                         object_store_memory=config.ray.object_store_memory_bytes, log_to_driver=log_to_driver,
                         configure_logging=False, _system_config=local_ray_system_config(metrics))

        start_retrying_a_node_that_timed_out(start_local_node)
        _own_local_node = ray.get_runtime_context().get_node_id()
        # Registered after ray.init's own exit hook, so it runs first (atexit is LIFO).
        atexit.register(_close_node_caches, config.ray.namespace)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types; say what we tried
        raise ServiceError(f"cannot start a local Ray: {exc}") from exc


def needs_coordinator(config: TierloadConfig) -> bool:
    """Whether a node cache this process starts needs the deployment's coordinator.

    The coordinator owns the warm tier and the map of which node holds which block (for peer
    reads); a job on tierload's own local Ray (one node on loopback) with no warm tier has
    neither, so its node cache runs alone, keeping its own checksum key in the hot directory
    (the key a coordinator adopts from the first node that offers it, if a service later owns
    the directory). That saves the coordinator's worker process: 130 MB of the quick small-s3
    bench's process tree and 0.7 CPU-s at start (``benchmarks/results/2026-12-02-no-coordinator/``).
    """
    if config.warm.url or _own_local_node is None or not ray_connected():
        return True
    import ray

    return ray.get_runtime_context().get_node_id() != _own_local_node


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


def node_endpoint(config: TierloadConfig, start_ray: bool = True) -> Endpoint:
    """How consumers on this node reach its cache: the live owner of the hot directory when
    this job may share it (:mod:`tierload.node.ownership`), else this deployment's cache
    actor, started if missing (and Ray with it, unless ``start_ray`` is False).

    Raises:
        TierInUseError: Another job with another configuration owns the hot directory.
        ServiceError: Ray or the cache actor could not be started, or ``start_ray`` is False
            and this process is not connected to Ray.
    """
    from tierload.node.ownership import join_owner

    # Ray is imported only past a join: a job that joins a running cache needs its channel alone
    # (importing Ray costs ~1 s and tens of MB in every training process).
    if "{node}" in config.hot.dir:
        import ray

        ensure_ray(config, start=start_ray)  # the directory names this node
        hot_dir = config.hot.dir.replace("{node}", ray.get_runtime_context().get_node_id()[:16])
    else:
        hot_dir = config.hot.dir
    joined = join_owner(config, hot_dir)
    if joined is not None:
        return joined
    import ray

    ensure_ray(config, start=start_ray)
    try:
        handle = get_node_cache(config, with_coordinator=needs_coordinator(config))
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
        effective = ray.get(getattr(handle, served(CoordinatorAPI.set_policy, COORDINATOR_METHODS,
                                                    "the coordinator")).remote(policy_dict), timeout=60)
    return {"nodes": caches, "coordinator": has_coordinator, "policy": effective}
