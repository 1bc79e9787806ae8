"""Small objects over a link that paces each connection's body: in place vs second future."""
import sys, time, json
from tierload_tools.s3local import LocalS3
from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
from tierload.config.loading import load_config
from tierload.stores.cold.source import ColdSource
import tierload.stores.cold.obstore_reads as reads
N = 600
with LocalS3() as s3:
    fs = s3.create_bucket("trk")
    fs.pipe({f"trk/o/{i:04d}": bytes([i % 251]) * 4096 for i in range(N)})
    for mbs in (0, 1):
        with EmulatedS3(s3.endpoint_url, LinkSettings(latency_ms=20, connection_mb_s=mbs, total_mb_s=0)) as proxy:
            opts = {**s3.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"}}
            src = ColdSource("s3://trk/o", load_config({"cold": {"storage_options": opts, "max_in_flight": 256}}).cold)
            objs = src.list_objects()
            req = [(o.url, o.version, 0, o.size) for o in objs]
            src.read_ranges(req[:20])
            for rep in range(2):
                for limit in (0, 8192):
                    reads.IN_PLACE_BODY_MAX_BYTES = limit
                    t = time.perf_counter(); c = time.process_time()
                    out = src.read_ranges(req)
                    w = time.perf_counter() - t
                    assert all(len(x) == 4096 for x in out)
                    print(json.dumps({"link_mb_s_per_conn": mbs, "in_place_max": limit, "obj_s": round(N / w), "cpu_us": round((time.process_time() - c) / N * 1e6)}), flush=True)
