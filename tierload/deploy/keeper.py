"""Keeps this node's cache actor alive for the datasets of this process.

Ray restarts a node cache that crashes (``max_restarts``), but not one removed for good
(``ray.kill``, ``tierload stop`` from elsewhere): its name is free and its endpoint file points
at a dead process, so every later call of a consumer would wait for a cache that never comes
back. :class:`NodeCacheKeeper` looks about once a second whether the process that published the
endpoint still runs, and when it does not, finds the cache again as a dataset does at start
(:func:`~tierload.deploy.runtime.node_endpoint`): it joins another job that owns the hot
directory by then, or asks Ray for the named actor again (``get_if_exists``: a cache Ray is
restarting is waited for, a removed one is created with the same config). A job that had joined
another job's cache (and so has no Ray of its own) takes the directory over when that job ends:
it starts a local Ray and the cache in it. The
new cache adopts the hot tier on disk and publishes its endpoint; readers, in this process and
in its DataLoader workers, find it through the endpoint file (:class:`~tierload.loader.consumer.NodeLink`).

One keeper per deployment and process; it ends when no dataset that uses it is left, when
this process stops the deployment (:func:`stop_keepers`), at exit (before Ray's own exit hook,
so a SIGTERM or the end of the script is not taken for a lost cache), or when Ray that this
process was connected to is no longer connected: a ``ray.shutdown()`` is the user's (or the
interpreter's) decision, and the keeper never starts Ray again after it, from its thread or any
other. Only a job that never had Ray (it joined another job's cache) starts one, to take over.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import Any

from tierload.config.models import TierloadConfig
from tierload.deploy.runtime import ray_connected
from tierload.wire.endpoint import read_endpoint

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
WARN_INTERVAL_S = 60.0  # failures to re-create are logged at most once a minute

_keepers: dict[str, NodeCacheKeeper] = {}
_keepers_lock = threading.Lock()
_exit_hook_registered = False


def process_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


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
        # Whether this process has been connected to Ray while this keeper ran: once it has, Ray
        # that is gone was shut down on purpose, and this keeper ends instead of starting it again.
        self._had_ray = ray_connected()
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
        """Re-create the cache if its process is gone; whether it runs afterwards."""
        endpoint = read_endpoint(self.hot_dir)
        if endpoint is not None and process_alive(endpoint.pid):
            return True

        from tierload.deploy.runtime import node_endpoint

        connected = ray_connected()
        if connected:
            self._had_ray = True
        elif self._had_ray:
            # Ray was shut down on purpose (ray.shutdown(), the end of the script, a signal): the
            # cache went with it. Starting Ray again here would do it behind the user's back.
            log.info("Ray was shut down in this process; the node cache is not started again (a new "
                     "TieredDataset starts both)")
            self._stop.set()
            return False
        if endpoint is None and connected:
            # No endpoint: the cache was closed on purpose (it withdraws its file) or the file
            # was removed while the cache runs; either way there is nothing to start again.
            return self._actor_exists()
        # No endpoint and no Ray here: this job had joined another job's cache, which closed when
        # that job ended (it withdraws its file at exit); this job still reads, so it takes over.
        try:
            # Joins whoever owns the directory now, or starts the cache here: in this process's
            # Ray (never started again here once shut down), or, for a job that had joined
            # another job's cache, in a local Ray of its own.
            node_endpoint(self.config, start_ray=not self._had_ray)
        except Exception as exc:  # noqa: BLE001 - Ray raises many types; try again on the next check
            self.failures += 1
            now = time.monotonic()
            if now - self._last_warning >= WARN_INTERVAL_S:
                self._last_warning = now
                log.warning("the node cache is gone and could not be created again (%s: %s); readers read "
                            "blocks themselves until it is back (%d failed tries so far)", type(exc).__name__, exc,
                            self.failures)
            return False
        self.recreated += 1
        now_running = read_endpoint(self.hot_dir)
        log.warning("the node cache (pid %s) was gone; it runs again (pid %s) with the same configuration",
                    endpoint.pid if endpoint is not None else "unknown",
                    now_running.pid if now_running is not None else "unknown")
        return True

    def _actor_exists(self) -> bool:
        import ray

        from tierload.deploy.runtime import node_cache_name

        name = node_cache_name(self.config, ray.get_runtime_context().get_node_id())
        try:
            ray.get_actor(name, namespace=self.config.ray.namespace)
        except ValueError:
            return False
        return True

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop looking, and wait for a re-creation in progress to end (so it cannot undo a stop)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)


def keep_node_cache(config: TierloadConfig, hot_dir: str, owner: Any) -> NodeCacheKeeper:
    """Keep this node's cache alive while ``owner`` (e.g. a dataset) lives.

    Args:
        config: The deployment's configuration.
        hot_dir: The directory holding the cache's endpoint file.
        owner: Weakly referenced; the keeper ends once every owner is gone.

    Returns:
        The deployment's keeper in this process.
    """
    from tierload.deploy.runtime import deployment_id

    global _exit_hook_registered

    deployment = deployment_id(config)
    with _keepers_lock:
        if not _exit_hook_registered:
            # Registered after this process's ray.init (the dataset started Ray first), so it runs
            # before Ray's exit hook: no keeper sees Ray ending at exit (atexit is LIFO).
            atexit.register(stop_keepers)
            _exit_hook_registered = True
        keeper = _keepers.get(deployment)
        if keeper is None or keeper._stop.is_set():
            keeper = _keepers[deployment] = NodeCacheKeeper(deployment, config, hot_dir)
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
