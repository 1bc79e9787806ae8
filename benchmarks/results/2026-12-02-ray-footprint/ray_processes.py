"""Start tierload's local Ray the way a job does, start the node cache, and list Ray's processes.

    python ray_processes.py [--metrics]

Prints one JSON object: seconds for ``ensure_ray`` and for the node cache (``node_endpoint``),
and per process of this process's tree (Ray's session): role, RSS/USS/PSS MB, after 3 s idle.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tree_memory import role  # noqa: E402


def main() -> None:
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import ensure_ray, node_endpoint

    root = tempfile.mkdtemp(prefix="tlrp")
    config = load_config({"hot": {"dir": os.path.join(root, "hot"), "capacity_bytes": "64MiB"},
                          "warm": {"url": None, "capacity_bytes": 0},
                          "manifest": {"cache_dir": os.path.join(root, "manifests")},
                          "ray": {"num_cpus": int(os.environ.get("CPUS", "2"))}, "metrics": {"enabled": "--metrics" in sys.argv}})
    started = time.perf_counter()
    ensure_ray(config)
    ray_s = time.perf_counter() - started
    node_endpoint(config)
    cache_s = time.perf_counter() - started - ray_s
    time.sleep(3)
    me = psutil.Process()
    rows = []
    for proc in me.children(recursive=True):
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        rows.append({"role": role(proc), "rss": round(info.rss / 1e6), "uss": round(info.uss / 1e6),
                     "pss": round(info.pss / 1e6)})
    rows.sort(key=lambda r: -r["rss"])
    driver = me.memory_full_info()
    print(json.dumps({"ensure_ray_s": round(ray_s, 2), "node_cache_s": round(cache_s, 2),
                      "driver_rss": round(driver.rss / 1e6), "children_rss": sum(r["rss"] for r in rows),
                      "load": os.getloadavg()[0], "processes": rows}, indent=1))


if __name__ == "__main__":
    main()
