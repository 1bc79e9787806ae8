"""The owner of a command's processes (tierload.cli.child_processes), on real processes: an orphaned
grandchild is ended at exit, a process handed off is kept only when the command succeeded, and
SIGTERM unwinds the command like Ctrl-C (exit 143)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

# The "command": a child that starts a grandchild and exits (an orphan, adopted by init, once the
# owner has seen it), a child handed off with keep_on_success, then it prints their pids and
# ends as argv[1] says: "ok" (exit 0), "fail" (exit 1) or "wait" (until a signal).
COMMAND = r"""
import json, subprocess, sys, time
from tierload.cli.child_processes import own_children
owner = own_children()
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                           f"p = subprocess.Popen({SLEEPER!r}); print(p.pid, flush=True); time.sleep(1.5)"],
                          stdout=subprocess.PIPE, text=True)
orphan = int(parent.stdout.readline())
parent.wait()
kept = subprocess.Popen(SLEEPER)
owner.keep_on_success(kept.pid)
print(json.dumps({"orphan": orphan, "kept": kept.pid}), flush=True)
if sys.argv[1] == "wait":
    time.sleep(600)
owner.succeeded = sys.argv[1] == "ok"
sys.exit(0 if owner.succeeded else 1)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone_soon(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _run(mode: str) -> tuple[subprocess.Popen, dict[str, int]]:
    proc = subprocess.Popen([sys.executable, "-c", COMMAND, mode], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout is not None
    pids = json.loads(proc.stdout.readline())
    return proc, pids


def _cleanup(pids: dict[str, int]) -> None:
    for pid in pids.values():
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass


@pytest.mark.parametrize("mode, code, kept", [("ok", 0, True), ("fail", 1, False)])
def test_at_exit_the_orphan_ends_and_the_handed_off_child_only_on_failure(mode, code, kept):
    proc, pids = _run(mode)
    try:
        assert proc.wait(timeout=60) == code
        assert _gone_soon(pids["orphan"])
        if kept:
            assert _alive(pids["kept"])
        else:
            assert _gone_soon(pids["kept"])
    finally:
        _cleanup(pids)


def test_sigterm_unwinds_like_ctrl_c_and_ends_every_descendant():
    proc, pids = _run("wait")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        assert _gone_soon(pids["orphan"]) and _gone_soon(pids["kept"])
    finally:
        _cleanup(pids)
