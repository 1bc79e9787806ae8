"""Keeps this node's cache actor alive for the datasets of this process.

Ray restarts a node cache that crashes (``max_restarts``), but not one removed for good
(``ray.kill``, ``tierload stop`` from elsewhere): its name is free and its endpoint file points
at a dead process, so every later call of a consumer would wait for a cache that never comes
back. :class:`NodeCacheKeeper` looks about once a second whether the process that published the
endpoint still runs, and when it does not, finds the cache again as a dataset does at start
(:func:`~tierload.deploy.host.find_node_cache`): it joins another job that owns the hot
directory by then, or asks Ray for the named actor again (``get_if_exists``: a cache Ray is
restarting is waited for, a removed one is created with the same config), in this process's Ray
or through its service host (:mod:`tierload.deploy.host`; a new host when the last one died). A
job that had joined another job's cache (and so has no Ray of its own) takes the directory over
when that job ends: its service host starts a local Ray and the cache in it. The new cache
adopts the hot tier on disk and publishes its endpoint; readers, in this process and in its
DataLoader workers, find it through the endpoint file (:class:`~tierload.loader.consumer.NodeLink`).

One keeper per deployment and process; it ends when no dataset that uses it is left, when
this process stops the deployment (:func:`stop_keepers`), at exit (before Ray's own exit hook,
so a SIGTERM or the end of the script is not taken for a lost cache), or when Ray that this
process was connected to is no longer connected, or its service host was ended on purpose: a
``ray.shutdown()`` is the user's (or the interpreter's) decision, and the keeper never starts Ray
again after it, from its thread or any other. Only a job without Ray of its own (it joined another
job's cache, or its service host died) starts a service host, to take over.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from typing import Any

from tierload.config.models import TierloadConfig
from tierload.deploy.actors import deployment_id, node_cache_name
from tierload.deploy.host import find_node_cache, has_ray, host_ended_on_purpose, host_generation
from tierload.deploy.lifecycle import CacheState, Decision, NodeCacheLifecycle, Observation, decide
from tierload.errors import TierInUseError
from tierload.ray_presence import ray_connected
from tierload.wire.endpoint import read_endpoint, running_endpoint
from tierload.wire.messages import Endpoint

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
WARN_INTERVAL_S = 60.0  # failures to re-create are logged at most once a minute

_keepers: dict[str, NodeCacheKeeper] = {}
_keepers_lock = threading.Lock()
_exit_hook_registered = False


class NodeCacheKeeper:
    """Re-creates this node's cache actor when the process that published its endpoint is gone.

    Args:
        deployment: The deployment's id (:func:`~tierload.deploy.runtime.deployment_id`).
        config: The deployment's configuration (the actor is created again with it).
        hot_dir: The hot directory whose endpoint file the cache publishes (its last level).
    """

    def __init__(self, deployment: str, config: TierloadConfig, hot_dir: str) -> None:
        self.deployment = deployment
        self.config = config
        self.hot_dir = hot_dir
        self.recreated = 0
        self.failures = 0
        self._owners: weakref.WeakSet[Any] = weakref.WeakSet()
        self._stop = threading.Event()
        self._last_warning = float("-inf")
        # Whether this process has been connected to Ray itself while this keeper ran: once it has,
        # Ray that is gone was shut down on purpose, and this keeper ends instead of starting it again.
        self._had_ray = ray_connected()
        self._host = host_generation()  # the service host its cache runs in (None: this process's Ray, a join)
        self.lifecycle = NodeCacheLifecycle(hot_dir)
        self._thread = threading.Thread(target=self._loop, name="tierload-cache-keeper", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            with _keepers_lock:  # with keep_node_cache's lock: an owner is never added to an ending keeper
                if not self._owners:
                    self._stop.set()
                    if _keepers.get(self.deployment) is self:
                        del _keepers[self.deployment]
                    return
            self.check()

    def check(self) -> bool:
        """Look at the cache once and do what :func:`~tierload.deploy.lifecycle.decide` says:
        re-create it if its process is gone, end if it was stopped on purpose. Whether it runs
        afterwards."""
        if self.lifecycle.stopped:
            return False
        endpoint = read_endpoint(self.hot_dir)
        running = running_endpoint(self.hot_dir) is not None
        self._had_ray = self._had_ray or ray_connected()
        connected = has_ray()
        # Ray here, or in this process's service host. A host ended on purpose is Ray shut down on purpose;
        # one that died (killed, out of memory) is a lost cache: a new host starts it again.
        decision = decide(Observation(cache_runs=running, endpoint_withdrawn=endpoint is None,
                                      ray_connected=connected, had_ray=self._shut_down_on_purpose()))
        if decision is Decision.KEEP:
            if running and self.lifecycle.state is CacheState.LOST:  # back without us (another job took over)
                self.lifecycle.move(CacheState.RECREATING, "it runs again")
                self.lifecycle.move(CacheState.OWNED if connected else CacheState.JOINED, "found running")
            return running or (ray_connected() and self._actor_exists())
        if decision is Decision.STOP:
            # Ray was shut down on purpose (ray.shutdown(), the end of the script, a signal, the
            # service host ended): the cache went with it. Starting Ray again here would do it
            # behind the user's back.
            log.info("Ray was shut down in this process (or its service host); the node cache is not started "
                     "again (a new TieredDataset starts both)")
            self.lifecycle.stop("Ray was shut down in this process or its service host")
            self._stop.set()
            return False
        return self._recreate(endpoint.pid if endpoint is not None else None)

    def _recreate(self, gone_pid: int | None) -> bool:
        # Each move yields to a stop on purpose made meanwhile by another thread (the exit, tierload stop).
        if not (self.lifecycle.move_unless_stopped(CacheState.LOST, f"the cache's process (pid {gone_pid}) is gone")
                and self.lifecycle.move_unless_stopped(CacheState.RECREATING, "finding or starting it again")):
            return False
        try:
            # Joins whoever owns the directory now, or starts the cache: in this process's Ray
            # (never started again here once shut down), or through this process's service host
            # (a new one when the last died, or for a job that had joined another job's cache).
            find_node_cache(self.config, start_ray=not self._shut_down_on_purpose())
        except Exception as exc:  # noqa: BLE001 - Ray raises many types; try again on the next check
            if not self.lifecycle.move_unless_stopped(CacheState.LOST, f"re-creating failed: {type(exc).__name__}"):
                return False
            self.failures += 1
            now = time.monotonic()
            if now - self._last_warning >= WARN_INTERVAL_S:
                self._last_warning = now
                log.warning("the node cache is gone and could not be created again (%s: %s); readers read "
                            "blocks themselves until it is back (%d failed tries so far)", type(exc).__name__, exc,
                            self.failures)
            return False
        if not self.lifecycle.move_unless_stopped(CacheState.OWNED if has_ray() else CacheState.JOINED, "found again"):
            return False
        self._host = host_generation()
        self.recreated += 1
        now_running = read_endpoint(self.hot_dir)
        log.warning("the node cache (pid %s) was gone; it runs again (pid %s) with the same configuration",
                    gone_pid if gone_pid is not None else "unknown",
                    now_running.pid if now_running is not None else "unknown")
        return True

    def _shut_down_on_purpose(self) -> bool:
        """This process had Ray itself (Ray gone now was shut down on purpose), or the service host its
        cache ran in was ended on purpose."""
        return self._had_ray or host_ended_on_purpose(self._host)

    def _actor_exists(self) -> bool:
        import ray

        name = node_cache_name(self.config, ray.get_runtime_context().get_node_id())
        try:
            ray.get_actor(name, namespace=self.config.ray.namespace)
        except ValueError:
            return False
        return True

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop looking, and wait for a re-creation in progress to end (so it cannot undo a stop)."""
        self._stop.set()
        self.lifecycle.stop("stopped on purpose in this process")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)


def attach_node_cache(config: TierloadConfig, owner: Any) -> Endpoint:
    """Find or start this node's cache for ``owner`` (e.g. a dataset), and keep it alive while
    ``owner`` lives: the way a job reaches its node cache.

    The deployment's lifecycle (:mod:`tierload.deploy.lifecycle`) in this process moves
    ABSENT -> STARTING -> OWNED (a cache in this process's Ray cluster) or JOINED (another job's
    cache, through its endpoint), or REFUSED; a keeper then re-creates the cache if its process
    goes, until the deployment is stopped on purpose.

    Args:
        config: The deployment's configuration.
        owner: Weakly referenced; the keeper ends once every owner is gone.

    Returns:
        The cache's endpoint.

    Raises:
        TierInUseError: Another job with another configuration owns the hot directory.
        ServiceError: Ray or the cache actor could not be started.
    """
    lifecycle = NodeCacheLifecycle(config.hot.dir)
    lifecycle.move(CacheState.STARTING, "a dataset starts")
    try:
        endpoint = find_node_cache(config)
    except TierInUseError:
        lifecycle.move(CacheState.REFUSED, "another job with other settings owns the hot directory")
        raise
    except BaseException:
        lifecycle.move(CacheState.ABSENT, "the start failed")
        raise
    lifecycle.move(CacheState.OWNED if has_ray() else CacheState.JOINED, "found")
    keep_node_cache(config, endpoint.hot_dirs[-1], owner, lifecycle)
    log.debug("node cache of deployment %s: %s", deployment_id(config), lifecycle.state.value)
    return endpoint


def keep_node_cache(config: TierloadConfig, hot_dir: str, owner: Any,
                    lifecycle: NodeCacheLifecycle | None = None) -> NodeCacheKeeper:
    """Keep this node's cache alive while ``owner`` (e.g. a dataset) lives.

    Args:
        config: The deployment's configuration.
        hot_dir: The directory holding the cache's endpoint file.
        owner: Weakly referenced; the keeper ends once every owner is gone.
        lifecycle: Where the cache stands (OWNED or JOINED); a keeper made here takes it over.
            Default: a cache found running in this process's Ray cluster or its service host's
            (OWNED), or not (JOINED).

    Returns:
        The deployment's keeper in this process.
    """
    global _exit_hook_registered

    deployment = deployment_id(config)
    with _keepers_lock:
        if not _exit_hook_registered:
            # Registered after this process's ray.init or its service host's start (the dataset
            # started them first), so it runs before their exit hooks: no keeper sees Ray or the host
            # ending at exit (atexit is LIFO).
            atexit.register(stop_keepers)
            _exit_hook_registered = True
        keeper = _keepers.get(deployment)
        if keeper is None or keeper._stop.is_set():
            keeper = _keepers[deployment] = NodeCacheKeeper(deployment, config, hot_dir)
            if lifecycle is None:
                lifecycle = NodeCacheLifecycle(hot_dir)
                lifecycle.move(CacheState.STARTING, "kept")
                lifecycle.move(CacheState.OWNED if has_ray() else CacheState.JOINED, "found running")
            keeper.lifecycle = lifecycle
            keeper._owners.add(owner)
            keeper._thread.start()
        else:
            keeper._owners.add(owner)
        return keeper


def stop_keepers(deployment: str | None = None) -> None:
    """Stop this process's keeper of ``deployment`` (all keepers when None), so that actors
    stopped on purpose stay stopped."""
    with _keepers_lock:
        stopping = [_keepers.pop(name) for name in list(_keepers) if deployment in (None, name)]
    for keeper in stopping:
        keeper.stop()
