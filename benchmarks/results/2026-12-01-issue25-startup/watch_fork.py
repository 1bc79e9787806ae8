"""Parent CPU while a 4 s child lives, under the startup bench's MemoryWatch(interval_s=0.1):
a forked child (same cmdline: sampled as a worker, USS from smaps) vs a fresh interpreter."""
import os, subprocess, sys, time
import torch  # noqa: F401
from tierload_tools.bench.small.measure import MemoryWatch
with MemoryWatch(interval_s=0.1):
    for kind in ("fork", "subprocess"):
        c0, t0 = time.process_time(), time.perf_counter()
        if kind == "fork":
            pid = os.fork()
            if pid == 0:
                time.sleep(4); os._exit(0)
            os.waitpid(pid, 0)
        else:
            subprocess.run([sys.executable, "-c", "import time; time.sleep(4)"], check=True)
        print(kind, "parent CPU s", round(time.process_time() - c0, 3), "wall", round(time.perf_counter() - t0, 2))
