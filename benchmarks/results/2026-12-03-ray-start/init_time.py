import time
import ray
from tierload.config.loading import load_config
from tierload.deploy import runtime
t = time.perf_counter()
runtime.ensure_ray(load_config({"ray": {"num_cpus": 1, "object_store_memory_bytes": 100 * 2**20}, "metrics": {"enabled": False}}, environ={}), log_to_driver=False)
print(round(time.perf_counter() - t, 3))
ray.shutdown()
