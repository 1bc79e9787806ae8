"""Where a contender's CPU time goes: py-spy on every Python process of its tree, summarised.

``py-spy record --subprocesses`` does not follow children on this kind of machine (it
samples only the root), so :class:`TreeProfiler` watches the contender's process tree and
attaches one ``py-spy record --pid PID --nonblocking`` to each Python process that appears:
the training process, its DataLoader workers, and Ray's workers (``ray::...``, where
tierload's node cache actor runs). When they have exited it merges their "raw" collapsed
stacks into one file, each line prefixed ``process PID:"CMDLINE";`` (py-spy's own
``--subprocesses`` format). A sample is one thread's stack at one instant; threads py-spy sees
as idle are left out, but a thread blocked on a Python lock (``Condition.__enter__``,
``Condition.wait``) usually is not, so the shares are of non-idle thread samples, not of CPU
time, and a role with many threads can hold more samples than its wall time.
:func:`summarise` groups the samples by process role and lists the functions with the most
samples: any function at the leaf (self), and tierload's own functions anywhere on the
stack (inclusive).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psutil

RATE_HZ = 50
_PROCESS = re.compile(r'^process (\d+):"(.*)"$')
_LINE = re.compile(r":\d+\)$")


def py_spy_binary() -> str:
    """py-spy beside this interpreter, or on PATH.

    Raises:
        FileNotFoundError: py-spy is not installed.
    """
    found = Path(sys.executable).with_name("py-spy")
    binary = str(found) if found.exists() else shutil.which("py-spy")
    if not binary:
        raise FileNotFoundError("py-spy is not installed (pip install py-spy)")
    return binary


class TreeProfiler:
    """Attaches py-spy to every Python process in ``root_pid``'s tree while it runs.

    Args:
        root_pid: The contender's process.
        output: The merged raw profile to write on exit.
        rate_hz: Samples per second per process.
    """

    def __init__(self, root_pid: int, output: Path, rate_hz: int = RATE_HZ) -> None:
        self.root_pid, self.output, self.rate_hz = root_pid, Path(output), rate_hz
        self.binary = py_spy_binary()
        self.spies: dict[int, tuple[subprocess.Popen, Path]] = {}
        self.cmdlines: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _wanted(self, proc: psutil.Process) -> str | None:
        cmdline = " ".join(proc.cmdline())
        if cmdline.startswith("ray::") or (proc.pid == self.root_pid or "tierload_tools.bench.small" in cmdline):
            return cmdline
        return None

    def _attach(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                cmdline = self._wanted(proc)
            except psutil.Error:
                continue
            if cmdline is None:
                continue
            self.cmdlines[proc.pid] = cmdline  # Ray renames a worker when it becomes an actor: keep the latest
            if proc.pid not in self.spies:
                path = self.output.with_name(f"{self.output.stem}.{proc.pid}.raw")
                spy = subprocess.Popen([self.binary, "record", "--pid", str(proc.pid), "--nonblocking", "-r",
                                        str(self.rate_hz), "-f", "raw", "-o", str(path)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.spies[proc.pid] = (spy, path)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            self._attach()

    def __enter__(self) -> "TreeProfiler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for spy, _ in self.spies.values():
            try:
                spy.wait(timeout=15)   # its process has exited (or been killed): py-spy writes and exits
            except subprocess.TimeoutExpired:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=15)
        with open(self.output, "w", encoding="utf-8") as merged:
            for pid, (_, path) in sorted(self.spies.items()):
                if not path.exists():
                    continue
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    merged.write(f'process {pid}:"{self.cmdlines[pid]}";{line}\n')
                path.unlink()


def _role(pid: int, cmdline: str, contender_pids: list[int]) -> str:
    if cmdline.startswith("ray::"):
        return cmdline.split()[0]   # e.g. ray::NodeCache (Ray sets the actor's process title)
    if "tierload_tools.bench.small" in cmdline:
        return "main process" if pid == min(contender_pids) else "DataLoader workers"
    return "other: " + cmdline.split()[0].rsplit("/", 1)[-1][:40] if cmdline else "other"


def _function(frame: str) -> str:
    """``name (path/to/file.py:123)`` -> ``name (file.py)``: one entry per function, not per line."""
    head, _, where = frame.rpartition(" (")
    if not head:
        return frame
    file = _LINE.sub(")", "(" + where).strip("()").rsplit("/", 1)[-1]
    return f"{head} ({file})"


def _parse(path: Path) -> list[tuple[int, str, list[str], int]]:
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        process, *frames = stack.split(";")
        match = _PROCESS.match(process)
        pid, cmdline = (int(match.group(1)), match.group(2)) if match else (0, process)
        rows.append((pid, cmdline, frames, int(count)))
    return rows


def summarise(path: Path, top: int = 12) -> dict[str, Any]:
    """Samples per process role, and each role's top functions (self and inclusive).

    Returns:
        ``{"rate_hz", "total_samples", "roles": {role: {"samples", "share", "processes",
        "self": [[function, samples, share of role]], "inclusive": [...]}}}``.
    """
    rows = _parse(path)
    contender_pids = sorted({pid for pid, cmd, _, _ in rows if "tierload_tools.bench.small" in cmd}) or [0]
    by_role: dict[str, dict[str, Any]] = defaultdict(lambda: {"samples": 0, "pids": set(), "self": Counter(),
                                                               "inclusive": Counter()})
    for pid, cmdline, frames, count in rows:
        role = by_role[_role(pid, cmdline, contender_pids)]
        role["samples"] += count
        role["pids"].add(pid)
        functions = [_function(frame) for frame in frames if frame.strip()]
        if functions:
            role["self"][functions[-1]] += count
        for function in {_function(frame) for frame in frames if "tierload/" in frame}:
            role["inclusive"][function] += count
    total = sum(role["samples"] for role in by_role.values())
    roles = {}
    for name, role in sorted(by_role.items(), key=lambda item: -item[1]["samples"]):
        samples = role["samples"]
        roles[name] = {"samples": samples, "share": samples / total if total else 0.0, "processes": len(role["pids"]),
                       "self": [[f, c, c / samples] for f, c in role["self"].most_common(top)],
                       "inclusive": [[f, c, c / samples] for f, c in role["inclusive"].most_common(top)]}
    return {"rate_hz": RATE_HZ, "total_samples": total, "roles": roles}


def text(summary: dict[str, Any], roles: int = 3, top: int = 10) -> str:
    """The summary as lines: per role its share of CPU samples, then its top functions."""
    lines = [f"py-spy, {summary.get('rate_hz')} Hz per process, {summary.get('total_samples', 0)} non-idle thread "
             "samples (threads blocked on a lock count)"]
    for name, role in list(summary.get("roles", {}).items())[:roles]:
        lines.append(f"  {name}: {role['share']:.0%} of samples ({role['processes']} process(es))")
        lines.append("    self:      " + "; ".join(f"{f} {s:.0%}" for f, _, s in role["self"][:top]))
        lines.append("    inclusive: " + "; ".join(f"{f} {s:.0%}" for f, _, s in role["inclusive"][:top]))
    return "\n".join(lines)
