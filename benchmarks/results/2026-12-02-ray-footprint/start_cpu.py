"""CPU seconds the whole process tree spends to the first sample when a job starts the node cache.

    python start_cpu.py ROOT   # ROOT as for ../2026-12-01-issue25-startup/join_startup.py (make it first)

Runs ``join_startup.py owner ROOT`` with a fresh hot tier and manifest, waits for its first-sample
line, then sums user + system CPU seconds over the training process and every live descendant
(Ray's GCS, raylet, agents, workers; plus the reaped children the training process waited for),
and lets it exit. On a loaded machine wall seconds measure the load; the CPU the tree spends
does not (much), and 2 cores bound wall from below at CPU / 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "2026-12-01-issue25-startup", "join_startup.py")


def main(root: str) -> None:
    for stale in ("hot", "manifests", "exit"):
        shutil.rmtree(os.path.join(root, stale), ignore_errors=True)
        if os.path.isfile(os.path.join(root, stale)):
            os.unlink(os.path.join(root, stale))
    child = subprocess.Popen([sys.executable, SCRIPT, "owner", root], stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    first = {}
    for line in child.stdout:
        if line.startswith("{"):
            first = json.loads(line)
            break
    root_proc = psutil.Process(child.pid)
    per_role: dict[str, float] = {}
    total = 0.0
    for proc in [root_proc, *root_proc.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        cpu = times.user + times.system + (times.children_user + times.children_system if proc is root_proc else 0)
        name = "training process (+ reaped children)" if proc is root_proc else (
            cmd.split()[0] if cmd.startswith("ray::") else os.path.basename(cmd.split()[0]) + " "
            + next((p for p in cmd.split() if p.endswith(".py")), ""))
        per_role[name] = per_role.get(name, 0.0) + cpu
        total += cpu
    open(os.path.join(root, "exit"), "w").close()
    child.wait(timeout=120)
    os.unlink(os.path.join(root, "exit"))
    print(json.dumps({"after_torch_s": round(first.get("after_torch_s", -1), 2), "tree_cpu_s": round(total, 2),
                      "load": os.getloadavg()[0],
                      "per_process_cpu_s": {k: round(v, 2) for k, v in sorted(per_role.items(), key=lambda x: -x[1])}}))


if __name__ == "__main__":
    main(sys.argv[1])
