import json, sys, time, os
from tierload_tools.bench import probe
from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
from tierload_tools.bench.own_buckets import StoredBucket
from tierload_tools.bench.small.data import stored_bucket
from tierload_tools.s3local import CREDENTIALS, LocalS3
from tierload.config.loading import load_config
from tierload.stores.cold.source import ColdSource
from tierload.data.manifest import build_manifest  # noqa
directory = stored_bucket(2000, 4096, 20, "small", None, 0)
keys = StoredBucket(directory).keys
with LocalS3() as s3, EmulatedS3(s3.endpoint_url, LinkSettings(20.0, 0, 0), {"small-bench": f"stored:{directory}"}) as em:
    storage = {**CREDENTIALS, "client_kwargs": {"endpoint_url": em.endpoint_url, "region_name": "us-east-1"}}
    out = {}
    for inflight in [int(x) for x in sys.argv[1:]]:
        c = probe.measure_unsigned(em.endpoint_url, "small-bench", keys, 256, seconds=600.0)
        config = load_config({"cold": {"storage_options": storage, "max_in_flight": inflight}}, environ={})
        source = ColdSource("s3://small-bench/small", config.cold)
        objs = source.list_objects()
        import asyncio
        res = []
        for attempt in range(int(os.environ.get("REPEATS", "2"))):
            t0 = time.perf_counter()
            source.read_ranges([(o.url, o.version, 0, o.size) for o in objs])
            res.append(round(time.perf_counter() - t0, 3))
        print(json.dumps({"inflight": inflight, "ceiling_s": round(c.seconds, 3), "engine_s": res, "load": os.getloadavg()[0]}), flush=True)
