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
from typing import Any, Iterator

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
    unless ``log_to_driver`` no log monitor.

    Args:
        metrics: Whether metrics are asked for: the dashboard agent then starts in full, as
            ``ray[default]`` starts it, so the actors' metrics reach Ray's Prometheus endpoint.
        log_to_driver: The ``log_to_driver`` the block passes to ``ray.init``: False starts no log
            monitor on the nodes started in the block (nothing would read what it publishes).

    A Ray without one of the switches starts that process as before (logged at DEBUG).
    """
    try:
        from ray._private import node as ray_node
        from ray._private import utils as ray_utils
    except ImportError:  # a Ray without these modules: it starts as it does
        log.debug("Ray's start-up functions moved: starting Ray with every process it starts by default")
        yield
        return
    with contextlib.ExitStack() as undo:
        undo.enter_context(_replaced(ray_node.Node, "start_api_server", _no_api_server))
        undo.enter_context(_replaced(ray_node.Node, "__init__",
                                     _without_monitors(ray_node.Node.__init__, log_monitor=log_to_driver)))
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
