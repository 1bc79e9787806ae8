import time, psutil, os, ray
from tierload.deploy.local_ray import lean_local_ray, local_ray_system_config
t=time.time()
with lean_local_ray(metrics=True, log_to_driver=False):
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=200 * 2**20, namespace="tierload", log_to_driver=False,
             _system_config=local_ray_system_config(True))
print("init wall", round(time.time()-t,1))
me=psutil.Process()
def cpu():
    out={}
    for p in me.children(recursive=True):
        try: c=p.cpu_times(); out[p.pid]=(p.name()[:30], c.user+c.system)
        except Exception: pass
    return out
a=cpu(); s=me.cpu_times(); print({k:(v[0],round(v[1],2)) for k,v in a.items()}, "driver", s.user+s.system)
time.sleep(120)
b=cpu()
print("idle 120s:", {v[0]:round(v[1]-a.get(k,(0,0))[1],2) for k,v in b.items()})
print("total idle", round(sum(v[1]-a.get(k,(0,0))[1] for k,v in b.items()),2))
