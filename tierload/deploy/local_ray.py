"""tierload's own local Ray, sized to what tierload uses.

``ray.init()`` with no cluster starts, besides the GCS, the raylet, its runtime-env agent and
its log monitor (which tierload uses: workers need the first, actors' logs reach the driver
through the second): an API server (``dashboard.py``, started even with
``include_dashboard=False``; ~120 MB, and ``ray.init`` waits for it), a full dashboard agent
(the metrics agent and Prometheus endpoint, ~140 MB), the autoscaler monitor (one node, nothing
to scale) and one idle worker per CPU, started ahead for tasks (~127 MB each; tierload runs
actors only, each in a worker of its own). Measured on Ray 2.60:
``benchmarks/results/2026-12-02-ray-footprint/``.

What :func:`lean_local_ray` leaves out:

* always: the API server, the autoscaler monitor, the pre-started workers
  (``enable_worker_prestart`` and ``prestart_worker_first_driver``, Ray's ``ray_config_def.h``);
* unless metrics are asked for (``metrics.enabled``): the dashboard agent's metrics side (it is
  started minimal, as a ``pip install ray`` without ``ray[default]`` starts it) and Ray's own
  metric collection (``enable_metrics_collection``), which would otherwise wait for that agent;
* for a driver that does not take its workers' output (``ray.init(log_to_driver=False)``, as
  benchmarks and tests start Ray): the log monitor, which would glob the session's log files every
  0.1 s for a reader that never subscribes (``ray/_private/log_monitor.py``; 11-16 CPU-s over a
  12-minute test session, measured 2026-12-02).

Ray has no ``ray.init`` argument for these, so this module switches them off in Ray's
own start-up functions while ``ray.init`` runs (``ray/_private/node.py``: ``Node.start_api_server``,
``RayParams.no_monitor`` and ``RayParams.include_log_monitor``; ``ray/_private/services.py``: ``start_raylet`` asks
``ray._private.utils.get_dashboard_dependency_error`` whether to pass ``--minimal``), the way
:func:`tierload.deploy.runtime._loopback_node` keeps the node loopback. A Ray release that moves
them fails ``tests/test_local_ray_footprint.py``, which lists the session's processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from tierload.process_ending import end_processes

if TYPE_CHECKING:
    import psutil

log = logging.getLogger(__name__)

# Pre-started idle workers: one per CPU when the raylet starts, more when the first driver connects.
_NO_PRESTART: dict[str, Any] = {"enable_worker_prestart": False, "prestart_worker_first_driver": False}


def local_ray_system_config(metrics: bool) -> dict[str, Any]:
    """The ``_system_config`` of tierload's local Ray.

    Args:
        metrics: Whether metrics are asked for (``metrics.enabled``): Ray then collects its own
            and the actors' metrics for its metrics agent.

    Returns:
        Ray config names (``ray_config_def.h``) to values.
    """
    config = dict(_NO_PRESTART)
    if not metrics:
        config["enable_metrics_collection"] = False
    return config


@contextlib.contextmanager
def lean_local_ray(metrics: bool, log_to_driver: bool = True) -> Iterator[None]:
    """While a local Ray starts in this block: no API server, no autoscaler monitor,
    unless ``metrics`` a minimal dashboard agent (no metrics agent, no Prometheus endpoint) and
    unless ``log_to_driver`` no log monitor; and ``ray.init`` sees its node registered within
    :data:`_REGISTRATION_POLL_S` instead of at Ray's next whole second (:func:`_registered_promptly`).

    Args:
        metrics: Whether metrics are asked for: the dashboard agent then starts in full, as
            ``ray[default]`` starts it, so the actors' metrics reach Ray's Prometheus endpoint.
        log_to_driver: The ``log_to_driver`` the block passes to ``ray.init``: False starts no log
            monitor on the nodes started in the block (nothing would read what it publishes).

    A Ray without one of the switches starts that process as before (logged at DEBUG).
    """
    try:
        from ray._private import node as ray_node
        from ray._private import services as ray_services
        from ray._private import utils as ray_utils
    except ImportError:  # a Ray without these modules: it starts as it does
        log.debug("Ray's start-up functions moved: starting Ray with every process it starts by default")
        yield
        return
    with contextlib.ExitStack() as undo:
        undo.enter_context(_replaced(ray_node.Node, "start_api_server", _no_api_server))
        undo.enter_context(_replaced(ray_node.Node, "__init__",
                                     _without_monitors(ray_node.Node.__init__, log_monitor=log_to_driver)))
        undo.enter_context(_replaced(ray_services, "get_node", _registered_promptly(ray_services.get_node)))
        if not metrics:
            undo.enter_context(_replaced(ray_utils, "get_dashboard_dependency_error", _metrics_agent_not_wanted))
        yield


def _no_api_server(self: Any, **_: Any) -> None:
    """``Node.start_api_server`` of a local Ray that serves no dashboard, state API or job submission."""
    self._webui_url = None


def _without_monitors(init: Any, log_monitor: bool) -> Any:
    def start_without_monitors(self: Any, ray_params: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("head", args[0] if args else False):
            ray_params.no_monitor = True  # one node: nothing to scale
        if not log_monitor:
            ray_params.include_log_monitor = False  # read by Node.start_ray_processes
        init(self, ray_params, *args, **kwargs)

    return start_without_monitors


# How often the node's registration is looked for while a local Ray starts, and for how long at most
# (seconds): ray.init gives up 30 s after it started the node's processes (ray/_private/node.py).
_REGISTRATION_POLL_S = 0.02
_REGISTRATION_WAIT_S = 30.0


def _registered_promptly(get_node: Callable[[str, str], Any], wait_s: float | None = None
                         ) -> Callable[[str, str], Any]:
    """``services.get_node`` for a node that is starting: wait, in steps of
    :data:`_REGISTRATION_POLL_S`, until the GCS lists the node, then ask Ray's own ``get_node``,
    which then answers at once.

    Why: ``ray.init`` waits for its new node with ``services.get_node``, whose lookup (Ray's C++
    ``GlobalStateAccessor::GetNode``) looks again only after a whole second when the node has not
    registered yet: a raylet that registers 0.8 s after its start was seen at 1.01 s, one that registers
    at 2.1 s at 3.0 s (Ray 2.60, this 2-core machine). The wait here costs a node list per step, on
    loopback.

    Args:
        get_node: Ray's own lookup, ``(gcs_address, node_id hex) -> node info``.
        wait_s: How long the waits of all calls last together at most (default
            :data:`_REGISTRATION_WAIT_S`, ``ray.init``'s own limit).

    Raises:
        RuntimeError: The GCS did not list the node within ``wait_s``; Ray's own lookup raises the
            same when it finds no node, and ``ray.init`` then says the node timed out.
    """
    deadline: list[float] = []  # set at the first call

    def get_node_once_registered(gcs_address: str, node_id: str) -> Any:
        if not deadline:
            deadline.append(time.monotonic() + (_REGISTRATION_WAIT_S if wait_s is None else wait_s))
        try:
            from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled; no stub names it

            client = GcsClient(address=gcs_address)
            while time.monotonic() < deadline[0]:
                if any(listed.hex() == node_id for listed in client.get_all_node_info(timeout=5)):
                    return get_node(gcs_address, node_id)
                time.sleep(_REGISTRATION_POLL_S)
        except Exception as exc:  # noqa: BLE001 - a faster path only: Ray's own lookup answers instead
            log.debug("could not look for the new node's registration (%s): Ray's own lookup waits for it", exc)
            return get_node(gcs_address, node_id)
        raise RuntimeError(f"node {node_id} did not register with the GCS at {gcs_address}")

    return get_node_once_registered


def _metrics_agent_not_wanted() -> ImportError:
    """Read by ``start_raylet``: an error here starts the dashboard agent ``--minimal``."""
    return ImportError("metrics are not asked for (metrics.enabled: false): no metrics agent")


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    if not hasattr(owner, name):
        log.debug("Ray has no %s.%s: that process starts as by default", getattr(owner, "__name__", owner), name)
        yield
        return
    before = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)


# Ray's own words when its node did not register in time (ray/_private/node.py).
_NODE_START_TIMEOUT = "timed out during startup"


def start_retrying_a_node_that_timed_out(start: Callable[[], None]) -> None:
    """Run ``start`` (a ``ray.init`` that starts a local node); if the node timed out during
    start-up, end what that try left running and run ``start`` once more.

    Why: Ray 2.60's raylet waits a fixed 15 s for its dashboard agent to write its port file and
    exits if it has not (ray-project/ray#65983); ``ray.init`` then waits out its own fixed 30 s and
    raises "The current node timed out during startup", leaving the GCS, the agents and the reaper
    of that node running. On a loaded machine (a node whose CPUs the training job fills), the
    agent's imports alone can take that long. Seen twice in this project's test suite on 2 cores.

    Raises:
        Exception: Whatever ``start`` raised on the second try, or on the first try for any
            other reason (the caller names it).
    """
    started = time.time()
    try:
        start()
        return
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this
        if _NODE_START_TIMEOUT not in str(exc):
            raise
        left = _ray_processes_started_since(started)
        log.warning("Ray's local node timed out during start-up (its raylet waits a fixed 15 s for its dashboard "
                    "agent, ray-project/ray#65983; this machine is loaded): ending the %d processes that try left "
                    "and starting it once more", len(left))
        end_processes(left, grace_s=5.0)
    start()


def _ray_processes_started_since(started: float) -> list[psutil.Process]:
    """This process's descendants started at or after ``started`` (seconds since the epoch) that run
    Ray's own programs (the GCS and raylet binaries, its agents, reaper and monitors): a failed
    ``ray.init`` keeps no handle on them."""
    import psutil
    import ray

    ray_dir = os.path.dirname(ray.__file__)
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.create_time() >= started - 1 and ray_dir in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found

