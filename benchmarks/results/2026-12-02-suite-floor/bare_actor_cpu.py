import os, sys, time, psutil, ray
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__)) + ":" + os.environ.get("PYTHONPATH", "")
from tierload.deploy.local_ray import lean_local_ray, local_ray_system_config
with lean_local_ray(metrics=True, log_to_driver=False):
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=200 * 2**20, namespace="x", log_to_driver=False,
             _system_config=local_ray_system_config(True))
from bare_actor_mod import Bare
res = []
for i in range(4):
    a = ray.remote(Bare).options(num_cpus=0).remote()
    ray.get(a.ready.remote())
    time.sleep(1)
    for p in psutil.Process().children(recursive=True):
        try:
            if "Bare" in p.name() or "Bare" in " ".join(p.cmdline()):
                c = p.cpu_times(); res.append(round(c.user + c.system, 2))
        except Exception: pass
    ray.kill(a)
    time.sleep(0.5)
print("bare actor worker CPU-s", res)
