"""Run a command and record, per process of its tree, the peak RSS, USS and PSS (MB).

Usage: python tree_memory.py OUT.json -- COMMAND ...

Samples the command's process tree every 0.5 s (psutil ``memory_full_info``: smaps, so USS and
PSS are exact), names each process by its role (Ray's ``ray::`` titles, its agents' scripts),
and writes ``{"rows": [...], "peak_tree_rss_mb": ...}``; prints a Markdown table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil

ROLES = (("gcs_server", "gcs_server"), ("default_worker.py", "ray worker (starting)"), ("dashboard/agent.py", "dashboard agent"),
         ("dashboard/dashboard.py", "API server (dashboard.py)"), ("runtime_env/agent", "runtime-env agent"),
         ("log_monitor.py", "log monitor"), ("autoscaler/_private/monitor.py", "autoscaler monitor"),
         ("ray_process_reaper", "reaper"), ("tierload-manif", "manifest helper"))


def role(proc: psutil.Process) -> str:
    try:
        cmd = " ".join(proc.cmdline())
        name = proc.name()
    except psutil.Error:
        return "?"
    if cmd.startswith("ray::"):
        return cmd.split()[0]
    if name == "raylet":
        return "raylet"
    for needle, label in ROLES:
        if needle in cmd or needle == name:
            return label
    if "bench.small" in cmd or "bench.contenders" in cmd:
        return "contender (training process or its DataLoader worker)"
    if "moto" in cmd or "emulated" in cmd or "server.stop()" in cmd:
        return "bench harness (S3 server / link)"
    if "multiprocessing" in cmd or "spawn_main" in cmd or "forkserver" in cmd:
        return "python child: " + cmd[-60:]
    return (name + " " + cmd[-70:]).strip()


def main() -> None:
    out, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    child = subprocess.Popen(command)
    root = psutil.Process(child.pid)
    peaks: dict[int, dict] = {}
    tree_peak = 0
    while child.poll() is None:
        total = 0
        for proc in [root, *root.children(recursive=True)]:
            try:
                info = proc.memory_full_info()
            except psutil.Error:
                continue
            total += info.rss
            label = "bench CLI (the root, not the contender)" if proc is root else role(proc)
            row = peaks.setdefault(proc.pid, {"pid": proc.pid, "role": label, "rss": 0, "uss": 0, "pss": 0})
            if proc is not root and (not row["role"].startswith("ray::") or row["role"].startswith("ray::IDLE")):
                row["role"] = role(proc)  # a worker takes its actor's title later
            row["rss"], row["uss"], row["pss"] = (max(row["rss"], info.rss), max(row["uss"], info.uss),
                                                  max(row["pss"], info.pss))
        tree_peak = max(tree_peak, total)
        time.sleep(0.5)
    rows = sorted(peaks.values(), key=lambda r: -r["rss"])
    mb = 1e6
    with open(out, "w") as f:
        json.dump({"command": command, "rc": child.returncode, "peak_tree_rss_mb": tree_peak / mb,
                   "rows": [{**r, "rss": r["rss"] / mb, "uss": r["uss"] / mb, "pss": r["pss"] / mb} for r in rows]},
                  f, indent=1)
    print(f"| process | peak RSS MB | peak USS MB | peak PSS MB |\n|---|---|---|---|")
    for r in rows:
        if r["rss"] > 5 * mb:
            print(f"| {r['role']} | {r['rss'] / mb:.0f} | {r['uss'] / mb:.0f} | {r['pss'] / mb:.0f} |")
    print(f"| **sum of peaks** | {sum(r['rss'] for r in rows) / mb:.0f} | {sum(r['uss'] for r in rows) / mb:.0f} "
          f"| {sum(r['pss'] for r in rows) / mb:.0f} |")
    print(f"tree peak RSS (summed per sample): {tree_peak / mb:.0f} MB; rc {child.returncode}")
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
