"""Every command that starts processes ends them when it is interrupted (issue 25, item 4).

Each command runs for real in a subprocess, in its own process group (as a shell starts a job);
the test waits until the processes it starts exist (its local S3 server, a contender, Ray's
raylet), records every descendant, sends the signal, waits for the command to end, and lists
what is left: every recorded descendant must be gone. Ctrl-C reaches the whole group (as a
terminal sends it); SIGTERM only the command's own process (as a supervisor or ``kill`` sends it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest
import yaml

Ready = Callable[[list[psutil.Process]], bool]


def _names(procs: list[psutil.Process]) -> str:
    found = []
    for proc in procs:
        try:
            found.append(" ".join(proc.cmdline())[:160] or proc.name())
        except psutil.Error:
            continue
    return "\n".join(found)


def _has(*parts: str) -> Ready:
    """Ready when, for every part, some descendant's command line contains it."""
    return lambda procs: all(part in _names(procs) for part in parts)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], ready: Ready, tmp_path: Path, timeout_s: float = 240.0
           ) -> tuple[subprocess.Popen, dict[int, float]]:
    """Start ``tierload ARGS`` in its own process group; returns it once ``ready`` holds for its
    descendants, with every descendant seen so far (pid -> start time)."""
    log = open(tmp_path / "command.log", "w", encoding="utf-8")  # noqa: SIM115 - closed by the test's end
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    # SIGINT at its default in the command, as from a terminal: a pytest started in the background of a
    # non-interactive shell (nohup ... &) has SIGINT ignored, the command would inherit that, and Python
    # then installs no KeyboardInterrupt handler (the command ran on, exit 0, after each SIGINT).
    proc = subprocess.Popen([sys.executable, "-m", "tierload.cli.main", *args], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=tmp_path, start_new_session=True,
                            preexec_fn=_default_sigint)
    seen: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    root = psutil.Process(proc.pid)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the command ended (code {proc.returncode}) before it was interrupted:\n"
                        + (tmp_path / "command.log").read_text(errors="replace")[-3000:])
        try:
            procs = root.children(recursive=True)
        except psutil.Error:
            procs = []
        for child in procs:
            try:
                seen.setdefault(child.pid, child.create_time())
            except psutil.Error:
                continue
        if ready(procs):
            return proc, seen
        time.sleep(0.2)
    _end_all(proc, seen)
    output = (tmp_path / "command.log").read_text(errors="replace")[-3000:]
    pytest.fail(f"not ready within {timeout_s:.0f} s:\n{output}")


def _alive(seen: dict[int, float]) -> list[psutil.Process]:
    left = []
    for pid, started in seen.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except psutil.Error:
            continue
    return left


def _end_all(proc: subprocess.Popen, seen: dict[int, float]) -> None:
    """Whatever a failed test leaves is killed, so it does not outlive the test."""
    for left in _alive(seen):
        try:
            left.kill()
        except psutil.Error:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _interrupt(proc: subprocess.Popen, seen: dict[int, float], signum: int, *, group: bool,
               tmp_path: Path) -> int:
    """Send ``signum`` (to the group or the command only), wait for the command to end, and
    assert that no descendant recorded before the signal is still alive."""
    try:
        if group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        code = proc.wait(timeout=120)
        deadline = time.monotonic() + 10  # an orphan's SIGKILL is delivered, not yet reaped
        while _alive(seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _alive(seen)
        assert not left, (f"left running after {signal.Signals(signum).name}:\n{_names(left)}\n--- output:\n"
                          + (tmp_path / "command.log").read_text(errors="replace")[-3000:])
        return code
    finally:
        _end_all(proc, seen)


def _contender_and_its_worker(procs: list[psutil.Process]) -> bool:
    """A contender and a DataLoader worker it forked (same command line) exist."""
    return sum("tierload_tools.bench.contenders" in line for line in _names(procs).splitlines()) >= 2


# Ctrl-C: the tierload contender, whose tree is the deepest the bench starts (bench > contender >
# its own Ray's raylet > Ray workers); SIGTERM: the plain s3fs contender and its DataLoader workers.
@pytest.mark.parametrize("signum, contender, ready", [
    (signal.SIGINT, "tierload", _has("ThreadedMotoServer", "tierload_tools.bench.emulated_s3", "raylet")),
    (signal.SIGTERM, "s3fs", _contender_and_its_worker)], ids=["sigint", "sigterm"])
def test_bench_ends_its_contenders_and_servers(tmp_path, signum, contender, ready):
    args = ["bench", "--quick", "--contenders", contender, "--samples", "64", "--epochs", "20",
            "--out", str(tmp_path / "out")]
    proc, seen = _start(args, ready, tmp_path)
    code = _interrupt(proc, seen, signum, group=False, tmp_path=tmp_path)
    assert code != 0


@pytest.mark.parametrize("signum, group", [(signal.SIGINT, False), (signal.SIGTERM, False)], ids=["sigint", "sigterm"])
def test_demo_ends_its_local_s3_and_ray(tmp_path, signum, group):
    # Parquet: the demo starts the same local S3 and Ray for either layout, and its 3 Parquet files
    # upload before Ray starts in a fraction of the 1,437 PNGs' CPU (~7 CPU-s of PUTs on moto).
    proc, seen = _start(["demo", "--layout", "parquet", "--epochs", "50", "--workers", "1"],
                        _has("ThreadedMotoServer", "raylet"), tmp_path)
    code = _interrupt(proc, seen, signum, group=group, tmp_path=tmp_path)
    assert code != 0


def test_warm_ends_what_it_started(s3, bucket, faulty_s3, tier_config, tmp_path):
    """``tierload warm`` stages through a coordinator in its own process (no cluster configured):
    Ctrl-C stops it after the batch in flight (exit 130), and it leaves no process behind."""
    name, fs = bucket
    for index in range(40):  # 40 MiB: two batches of the stager (32 MiB each)
        fs.pipe_file(f"{name}/ds/obj-{index:03d}.bin", bytes(2**20))
    faulty_s3.faults.first_byte_s = 1.0  # each GET waits: the run is still staging when interrupted
    options = {**s3.storage_options, "client_kwargs": {"endpoint_url": faulty_s3.endpoint_url,
                                                       "region_name": "us-east-1"}}
    config = tier_config(warm="64MiB", cold={"storage_options": options}, manifest={"layout": "files"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))
    gets_before = sum(faulty_s3.faults.gets.values())

    def staging(_procs: list[psutil.Process]) -> bool:
        return sum(faulty_s3.faults.gets.values()) > gets_before  # its cold reads have started

    proc, seen = _start(["warm", f"s3://{name}/ds", "--config", str(path)], staging, tmp_path)
    assert _interrupt(proc, seen, signal.SIGINT, group=False, tmp_path=tmp_path) == 130
