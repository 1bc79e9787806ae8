"""Where epoch 1 of the small-s3 quick workload goes: the bench's own tierload-s3 setup (2,000 x 4 KiB
on the emulated S3, 20 ms first byte, hot tier > dataset, 2 persistent workers, batch 256), with the
time each batch arrives after the epoch starts, the rig's ceiling measured in the same run, and the
node cache's counters per epoch (cold GETs, wire bytes: a block sent over the channel instead of read
from the hot tier).

    python benchmarks/results/2026-12-02-small-s3-epoch1/epoch1_timeline.py [COUNT] [WORKERS]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from torch.utils.data import DataLoader


def main() -> None:
    import ray

    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload_tools.bench import probe
    from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
    from tierload_tools.bench.own_buckets import StoredBucket
    from tierload_tools.bench.small.contenders import tierload_config
    from tierload_tools.bench.small.data import stored_bucket
    from tierload_tools.bench.small.measure import collate_bytes
    from tierload_tools.s3local import CREDENTIALS, LocalS3

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    directory = stored_bucket(count, 4096, 20, "small", None, 0)
    keys = StoredBucket(directory).keys
    buckets = {"small-bench": f"stored:{directory}"}
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, LinkSettings(20.0, 0, 0), buckets) as em, \
            tempfile.TemporaryDirectory() as work:
        ceiling = probe.measure_unsigned(em.endpoint_url, "small-bench", keys, 256, seconds=600.0)
        storage = {**CREDENTIALS, "client_kwargs": {"endpoint_url": em.endpoint_url, "region_name": "us-east-1"}}
        setup = {"workdir": work, "total_bytes": count * 4096}
        config = tierload_config(setup)
        started = time.perf_counter()
        dataset = TieredDataset("s3://small-bench/small", config=config, layout="files", batch_size=256, seed=0,
                                storage_options=storage)
        setup_s = time.perf_counter() - started
        loader = DataLoader(dataset, batch_size=256, num_workers=workers, persistent_workers=workers > 0,
                            collate_fn=collate_bytes)
        out = {"objects": count, "workers": workers, "blocks": len(dataset.manifest.blocks),
               "packs": dataset.manifest.num_packs, "setup_s": setup_s,
               "ceiling_objects_per_s": ceiling.objects / ceiling.seconds, "ceiling_s": ceiling.seconds,
               "uptime": os.getloadavg(), "epochs": []}
        from tierload.data.cold_read import read_cold
        from tierload.stores.cold.source import ColdSource

        # tierload's own GET engine on the same pack, in this process (the node cache's fetch does this)
        source = ColdSource(dataset._cold, config.cold)
        for attempt in range(2):
            t0 = time.perf_counter()
            read_cold(source, dataset.manifest.blocks[0])
            out[f"engine_pack_read_s_{attempt}"] = time.perf_counter() - t0
        try:
            for epoch in range(2):
                dataset.set_epoch(epoch)
                t0 = time.perf_counter()
                arrivals, samples = [], 0
                for _, labels in loader:
                    samples += len(labels)
                    arrivals.append(round(time.perf_counter() - t0, 4))
                seconds = time.perf_counter() - t0
                stats = dataset.epoch_stats(epoch)
                out["epochs"].append({
                    "epoch": epoch, "samples": samples, "seconds": seconds, "samples_per_s": samples / seconds,
                    "ratio_to_ceiling": samples / seconds / out["ceiling_objects_per_s"],
                    "batch_arrivals_s": arrivals,
                    **{k: stats.get(k, 0) for k in ("accesses", "hot_hits", "cold_misses", "cold_gets", "cold_bytes",
                                                     "wire_raw_bytes", "wire_sent_bytes")}})
            out["consumer_stats"] = dict(dataset.consumer_stats)
        finally:
            stop_actors(config)
            ray.shutdown()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
