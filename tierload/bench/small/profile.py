"""Where a contender's CPU time goes: ``py-spy record --subprocesses`` and a summary of it.

py-spy samples every Python process of the contender's tree (the training process, its
DataLoader workers, and Ray's workers, where tierload's node cache actor runs) and writes
"raw" collapsed stacks: ``process PID:"CMDLINE";frame;...;frame COUNT`` per line, frames
as ``function (file:line)``, idle threads left out. :func:`summarise` groups the samples
by process role and lists the functions with the most samples: any function on-CPU at the
leaf (self), and tierload's own functions anywhere on the stack (inclusive).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

RATE_HZ = 50
_PROCESS = re.compile(r'^process (\d+):"(.*)"$')
_LINE = re.compile(r":\d+\)$")


def py_spy_command(output: Path, rate_hz: int = RATE_HZ) -> list[str]:
    """The ``py-spy record`` prefix for a command whose tree is to be profiled into ``output``.

    Raises:
        FileNotFoundError: py-spy is not installed beside this interpreter or on PATH.
    """
    found = Path(sys.executable).with_name("py-spy")
    binary = str(found) if found.exists() else shutil.which("py-spy")
    if not binary:
        raise FileNotFoundError("py-spy is not installed (pip install py-spy)")
    return [binary, "record", "--subprocesses", "--nonblocking", "-r", str(rate_hz), "-f", "raw", "-o", str(output),
            "--"]


def _role(pid: int, cmdline: str, contender_pids: list[int]) -> str:
    if cmdline.startswith("ray::"):
        return cmdline.split()[0]   # e.g. ray::NodeCache (Ray sets the actor's process title)
    if "tierload.bench.small" in cmdline:
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
    contender_pids = sorted({pid for pid, cmd, _, _ in rows if "tierload.bench.small" in cmd}) or [0]
    by_role: dict[str, dict[str, Any]] = defaultdict(lambda: {"samples": 0, "pids": set(), "self": Counter(),
                                                               "inclusive": Counter()})
    for pid, cmdline, frames, count in rows:
        role = by_role[_role(pid, cmdline, contender_pids)]
        role["samples"] += count
        role["pids"].add(pid)
        functions = [_function(frame) for frame in frames]
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
    lines = [f"py-spy, {summary.get('rate_hz')} Hz, {summary.get('total_samples', 0)} on-CPU samples"]
    for name, role in list(summary.get("roles", {}).items())[:roles]:
        lines.append(f"  {name}: {role['share']:.0%} of samples ({role['processes']} process(es))")
        lines.append("    self:      " + "; ".join(f"{f} {s:.0%}" for f, _, s in role["self"][:top]))
        lines.append("    inclusive: " + "; ".join(f"{f} {s:.0%}" for f, _, s in role["inclusive"][:top]))
    return "\n".join(lines)
