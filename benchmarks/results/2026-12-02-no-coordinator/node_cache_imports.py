import sys, time, psutil, ray
from tierload.config.loading import load_config
from tierload.deploy.runtime import node_endpoint, stop_actors
config = load_config({"hot": {"dir": "/tmp/ncm/hot"}, "warm": {"url": None}, "ray": {"num_cpus": 2}}, environ={})
node_endpoint(config)
for p in psutil.Process().children(recursive=True):
    cmd = " ".join(p.cmdline())
    if "RayNodeCache" in cmd:
        maps = open(f"/proc/{p.pid}/maps").read()
        libs = sorted({l.split()[-1].split("/site-packages/")[-1].split("/")[0] for l in maps.splitlines() if "site-packages" in l})
        mi = p.memory_full_info()
        print("node cache", p.pid, "rss", mi.rss >> 20, "uss", mi.uss >> 20, libs)
stop_actors(config); ray.shutdown()
