"""Issue 26 items 11 and 12: a Ray head started the way ``tierload serve``'s hint says.

Item 12: the hint's start command listens on loopback only, and its stop ends only tierload's
actors (never ``ray stop``, which ends every Ray on the machine). Item 11: ``examples/ray_train.py
--demo`` runs where such a head runs and RAY_ADDRESS names it.

The head is started for real (``ray start --head`` in a subprocess, with the hint's options plus
its own temp dir and ports), and only its own processes (those naming its temp dir) are stopped.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from store_servers import free_port

psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parent.parent


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def _hint_commands() -> tuple[dict[str, str], list[str]]:
    """The environment the hint exports and its ``ray start`` command, as argv."""
    from tierload.cli.service import NO_CLUSTER_HINT

    quoted = re.findall(r"`([^`]+)`", NO_CLUSTER_HINT)
    exports = dict(part.removeprefix("export ").split("=", 1) for part in quoted if part.startswith("export "))
    (start,) = [part for part in quoted if part.startswith("ray start")]
    return exports, shlex.split(start)


def _own_processes(temp_dir: str) -> list:
    """This user's processes that belong to the head whose temp dir is ``temp_dir``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "uids"]):
        try:
            if proc.info["uids"].real == os.getuid() and temp_dir in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.Error, TypeError, AttributeError):
            continue
    return found


def _head_processes(temp_dir: str, address: str) -> list:
    """The head's processes: those that name its temp dir or its GCS address (Ray's client server
    names only the address), and their descendants (Ray's agents retitle themselves
    ``ray::DashboardAgent``: their command line names neither, and they outlive the raylet)."""
    found = {proc.pid: proc for proc in _own_processes(temp_dir) + _own_processes(f"--address={address}")}
    for proc in list(found.values()):
        try:
            found.update((child.pid, child) for child in proc.children(recursive=True))
        except psutil.Error:
            continue
    return list(found.values())


def _stop_head(temp_dir: str, address: str) -> None:
    """End the head's processes (only those of :func:`_head_processes`)."""
    for _ in range(3):
        procs = _head_processes(temp_dir, address)
        if not procs:
            return
        for proc in procs:
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass


@pytest.fixture(scope="module")
def loopback_head():
    """A Ray head started with the hint's command; yields ``(address, temp dir, its env)``.

    Its temp dir is in a short directory of its own (Ray's socket paths must fit in 107 bytes).
    One head serves both tests of this module: the first checks what it listens on, the second
    only needs one running (the demo starts its own Ray beside it); starting it once saves a head.
    """
    exports, argv = _hint_commands()
    own = tempfile.mkdtemp(prefix="tl-head-")  # 0700; Ray makes its temp dir in it 0777
    temp_dir = os.path.join(own, "ray")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    env.update(exports, RAY_TMPDIR=temp_dir)
    ray = str(Path(sys.executable).parent / "ray")
    address = ""
    try:
        # A port probed free can still be taken before Ray binds it (a parallel test's server):
        # only that failure is retried, on fresh ports, after ending what the try left running.
        for _attempt in range(3):
            port = free_port()
            address = f"127.0.0.1:{port}"
            extra = ["--port", str(port), "--temp-dir", temp_dir, "--num-cpus", "1", "--disable-usage-stats",
                     "--ray-client-server-port", str(free_port()), "--dashboard-port", str(free_port()),
                     "--dashboard-agent-listen-port", str(free_port())]
            proc = subprocess.run([ray, *argv[1:], *extra], capture_output=True, text=True, env=env, timeout=180)
            if proc.returncode == 0 or "already in use" not in proc.stdout + proc.stderr:
                break
            _stop_head(temp_dir, address)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        yield address, temp_dir, env
    finally:
        if address:
            _stop_head(temp_dir, address)
        shutil.rmtree(own, ignore_errors=True)


def test_the_serve_hint_starts_a_loopback_head_and_stops_only_tierload(loopback_head):
    from tierload.cli.service import NO_CLUSTER_HINT

    address, temp_dir, _ = loopback_head
    listening = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the dashboard and agents come up after `ray start` returns
        listening = []
        for proc in _own_processes(temp_dir):
            try:
                listening += [(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                              if c.status == psutil.CONN_LISTEN]
            except psutil.Error:
                continue
        if {"gcs_server", "raylet"} <= {name for name, _, _ in listening}:
            break
        time.sleep(0.5)
    assert {"gcs_server", "raylet"} <= {name for name, _, _ in listening}, listening
    assert int(address.rsplit(":", 1)[1]) in {port for name, _, port in listening if name == "gcs_server"}
    exposed = [entry for entry in listening if not _loopback(entry[1])]
    assert not exposed, f"the hint's head listens beyond loopback: {exposed}"
    assert "`ray stop`" not in NO_CLUSTER_HINT.replace("(not `ray stop`", "")  # never recommended as the stop
    assert "`tierload stop --address auto`" in NO_CLUSTER_HINT


def test_the_ray_train_demo_runs_where_a_ray_head_runs(loopback_head):
    """Item 11: with a head running and RAY_ADDRESS naming it, ``--demo`` still runs (its own Ray)."""
    address, temp_dir, env = loopback_head
    work = Path(temp_dir).parent  # private (0700), unlike Ray's temp dir
    env = {**env, "RAY_ADDRESS": address, "HOME": str(work / "home"),
           "TIERLOAD_HOT__DIR": str(work / "hot"), "TIERLOAD_WARM__URL": str(work / "warm"),
           "TIERLOAD_MANIFEST__CACHE_DIR": str(work / "manifests")}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # a user's usual shell
    # One epoch on one worker: what is checked is that the demo runs beside the head, not how
    # TorchTrainer splits the rows (tests/test_ray_train.py checks that, with 2 workers and 2 epochs).
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "ray_train.py"), "--demo", "--epochs", "1",
                           "--num-workers", "1"],
                          capture_output=True, text=True, env=env, cwd=str(work), timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "'epoch': 0" in proc.stdout + proc.stderr, proc.stdout[-2000:]  # rank 0 reported its epoch
