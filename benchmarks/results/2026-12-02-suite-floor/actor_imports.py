import os, sys, time, glob, pathlib, tempfile
os.environ["PYTHONPROFILEIMPORTTIME"]="1"
import ray
from tierload.deploy.local_ray import lean_local_ray, local_ray_system_config
with lean_local_ray(metrics=True, log_to_driver=False):
    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=200 * 2**20, namespace="tierload", log_to_driver=False,
             _system_config=local_ray_system_config(True))
root=pathlib.Path(tempfile.mkdtemp())
data=root/"data"; data.mkdir()
for i in range(50): (data/f"{i:03d}.bin").write_bytes(os.urandom(1000))
from tierload.config.loading import load_config
from tierload.loader.dataset import TieredDataset
cfg=load_config({"hot":{"dir":str(root/"hot"),"capacity_bytes":"64MiB"},"warm":{"url":str(root/"warm"),"capacity_bytes":"64MiB"},"manifest":{"cache_dir":str(root/"m")},"ray":{"address":"auto"}})
ds=TieredDataset(f"file://{data}", cfg)
n=sum(1 for _ in ds); print("samples", n)
import psutil
for p in psutil.Process().children(recursive=True):
    try:
        c=p.cpu_times(); print(p.pid, " ".join(p.cmdline())[:60], round(c.user+c.system,2))
    except Exception: pass
print(ray._private.worker.global_worker.node.get_session_dir_path())
