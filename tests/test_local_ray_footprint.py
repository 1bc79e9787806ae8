"""tierload's own local Ray runs what tierload uses, and no more (issue 25, item 2).

A child process starts the local Ray exactly as a training job does (no cluster configured):
``node_endpoint`` starts Ray and this node's cache actor, and the coordinator only when there is a
warm tier (one node on loopback has no peers; the coordinator owns the warm tier and the holder
map). It then lists every process of the Ray session (psutil: the children of the driver).
Without metrics: no API server (``dashboard.py``), no autoscaler monitor, a minimal dashboard
agent (no metrics agent) and no worker beyond the actors' (Ray pre-starts one idle worker per CPU
otherwise). With metrics asked for, the full agent runs and Ray's Prometheus endpoint carries the
node cache's metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

pytest.importorskip("psutil")

_CHILD = textwrap.dedent("""
    import json, sys, time, urllib.request
    import psutil, ray
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import node_endpoint, stop_actors

    metrics = sys.argv[2] == "metrics"
    warm = {"url": sys.argv[1] + "-warm", "capacity_bytes": 2**20} if sys.argv[2] == "warm" else {"url": None}
    config = load_config({"hot": {"dir": sys.argv[1]}, "warm": warm, "ray": {"num_cpus": 2},
                          "metrics": {"enabled": metrics, "export_interval_s": 0.5}}, environ={})
    node_endpoint(config)  # starts the local Ray, this node's cache actor and, with a warm tier, the coordinator
    exported = None
    if metrics:  # the node cache's hot-tier capacity gauge, on Ray's Prometheus endpoint
        port = [node["MetricsExportPort"] for node in ray.nodes() if node["Alive"]][0]
        exported, deadline = False, time.monotonic() + 90
        while not exported and time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                exported = "ray_tierload_capacity_bytes{" in response.read().decode()
            time.sleep(0.5)
    processes = []
    for proc in psutil.Process().children(recursive=True):
        try:
            processes.append(" ".join(proc.cmdline()))
        except psutil.Error:
            pass
    print("RESULT " + json.dumps({"processes": processes, "exported": exported}))
    stop_actors(config)
    ray.shutdown()
""")


def _session_processes(hot_dir: str, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    env["RAY_TMPDIR"] = ray_tmp = tempfile.mkdtemp(prefix="tlf")  # short: Ray's socket paths stay under 107 bytes
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, hot_dir, mode], capture_output=True, text=True,
                              timeout=240, env=env)
    finally:
        subprocess.run(["rm", "-rf", ray_tmp], check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    found = json.loads(line[len("RESULT "):])
    commands = found["processes"]
    assert any("gcs_server" in c for c in commands) and any("raylet" in c for c in commands), commands
    return found


def _with(commands: list[str], needle: str) -> list[str]:
    return [c for c in commands if needle in c]


def _workers(commands: list[str]) -> list[str]:
    """Ray's workers (``ray::IDLE``, or ``ray::<actor class>`` once an actor runs in one); Ray's agents
    title themselves ``ray::...Agent`` too. A worker running a method is titled ``ray::<class>.<method>``
    meanwhile (a coordinator in its periodic ``sync``, seen once in a CI run): named by its class here."""
    titles = [c.split()[0].split(".")[0] for c in commands if c.startswith("ray::")]
    return [title for title in titles if title not in ("ray::DashboardAgent", "ray::RuntimeEnvAgent")]


def test_the_local_ray_runs_no_dashboard_agents_or_idle_workers_without_metrics(tmp_path):
    commands = _session_processes(str(tmp_path / "hot"), "plain")["processes"]
    assert not _with(commands, "dashboard/dashboard.py"), "the API server runs"
    assert not _with(commands, "autoscaler/_private/monitor.py"), "the autoscaler monitor runs"
    agents = _with(commands, "dashboard/agent.py")
    assert len(agents) == 1 and "--minimal" in agents[0], agents  # the raylet needs one; no metrics agent in it
    assert len(_with(commands, "runtime_env/agent/main.py")) == 1  # workers' environments: Ray needs it
    assert len(_with(commands, "log_monitor.py")) == 1  # the actors' log lines reach the job's driver
    assert _workers(commands) == ["ray::_RayNodeCache"], commands  # no warm tier, no peers: no coordinator


def test_a_local_ray_with_a_warm_tier_runs_the_coordinator_that_owns_it(tmp_path):
    commands = _session_processes(str(tmp_path / "hot"), "warm")["processes"]
    assert sorted(_workers(commands)) == ["ray::_RayCoordinator", "ray::_RayNodeCache"], commands


def test_the_local_ray_exports_metrics_when_they_are_asked_for(tmp_path):
    found = _session_processes(str(tmp_path / "hot"), "metrics")
    commands = found["processes"]
    assert found["exported"] is True, "the node cache's metrics never reached Ray's Prometheus endpoint"
    agents = _with(commands, "dashboard/agent.py")
    assert len(agents) == 1 and "--minimal" not in agents[0], agents  # the metrics agent serves the endpoint
    assert not _with(commands, "dashboard/dashboard.py"), "the API server runs"
    assert _workers(commands) == ["ray::_RayNodeCache"], commands


def test_a_ray_started_lean_without_log_to_driver_runs_no_log_monitor(ray_session):
    """The tests' own Ray (tests/conftest.py) starts with ``lean_local_ray(log_to_driver=False)``: nothing
    reads its workers' output, so no log monitor globs its log files every 0.1 s."""
    import psutil

    session_dir = ray_session._private.worker._global_node.get_session_dir_path()
    commands = []
    for proc in psutil.Process().children(recursive=True):
        try:
            commands.append(" ".join(proc.cmdline()))
        except psutil.Error:
            pass
    session = _with(commands, session_dir)
    assert _with(session, "raylet") and _with(session, "dashboard/agent.py"), commands  # this Ray's processes
    assert not _with(session, "log_monitor.py"), session


_AFTER_SHUTDOWN = textwrap.dedent("""
    import json, sys
    import ray
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import ensure_ray, needs_coordinator

    config = load_config({"hot": {"dir": sys.argv[1]}, "warm": {"url": None}, "ray": {"num_cpus": 1}}, environ={})
    ensure_ray(config)
    own = needs_coordinator(config)
    ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, configure_logging=False)  # the user's own Ray now
    users = needs_coordinator(config)
    ray.shutdown()
    print("RESULT " + json.dumps({"own": own, "users": users}))
""")


def test_a_ray_the_user_starts_after_shutting_tierloads_down_keeps_the_coordinator(tmp_path):
    """Only the Ray tierload started itself runs its node cache alone: after ``ray.shutdown()`` and a
    ``ray.init()`` of the user's, a node cache started there gets the coordinator again."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    env["RAY_TMPDIR"] = ray_tmp = tempfile.mkdtemp(prefix="tlf")
    try:
        proc = subprocess.run([sys.executable, "-c", _AFTER_SHUTDOWN, str(tmp_path / "hot")], capture_output=True,
                              text=True, timeout=240, env=env)
    finally:
        subprocess.run(["rm", "-rf", ray_tmp], check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    assert json.loads(line[len("RESULT "):]) == {"own": False, "users": True}
