import time, json
import ray, ray._private.services as services
from tierload.config.loading import load_config
from tierload.deploy import runtime
calls = []
orig = services.get_node
def probe(*a, **k):
    t = time.perf_counter()
    try:
        r = orig(*a, **k); calls.append(("ok", round(time.perf_counter() - t, 3))); return r
    except Exception as e:
        calls.append(("fail", round(time.perf_counter() - t, 3))); raise
services.get_node = probe
t = time.perf_counter()
runtime.ensure_ray(load_config({"ray": {"num_cpus": 1, "object_store_memory_bytes": 100 * 2**20}, "metrics": {"enabled": False}}, environ={}), log_to_driver=False)
print(round(time.perf_counter() - t, 3), calls)
ray.shutdown()
