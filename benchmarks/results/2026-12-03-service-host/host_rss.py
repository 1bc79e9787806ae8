import time, sys, psutil, os
from tierload import TieredDataset, load_config
from tierload.deploy import host as H
cfg = load_config({"hot": {"dir": "/tmp/h1/hot", "capacity_bytes": "16MiB"}, "warm": {"url": None},
                   "manifest": {"cache_dir": "/tmp/h1/man"}, "ray": {"num_cpus": 1}})
ds = TieredDataset("file:///tmp/h1/data", cfg, layout="files", batch_size=1)
n = sum(1 for _ in ds)
p = psutil.Process(H._host.process.pid)
m = p.memory_full_info()
print("host rss %.1f uss %.1f pss %.1f MB" % (m.rss/1e6, m.uss/1e6, m.pss/1e6))
for c in p.children(recursive=True):
    mi = c.memory_full_info(); print("  %-30s rss %.1f uss %.1f" % (c.name()[:30], mi.rss/1e6, mi.uss/1e6))
print("me rss %.1f" % (psutil.Process().memory_info().rss/1e6))
