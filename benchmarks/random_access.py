"""``ds[i]`` over packs of small objects: what S3 sees, and a read's time cold and hot.

    python benchmarks/random_access.py               # prints the setup and the figures

Setup (printed): a local S3 server (moto, no emulated latency) holding ``--objects`` objects of
``--object-bytes`` random bytes, packed by the manifest into packs of about ``--pack-bytes``; a
hot tier large enough for all of it, no warm tier. ``--reads`` distinct random samples are read
with ``ds[i]`` before anything is cached (each a pack member read alone), then one epoch is
iterated (every pack goes hot) and the same samples are read again (hot files, no call). S3
GETs and bytes come from the node cache's counters; times are wall seconds on this machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=3000)
    parser.add_argument("--object-bytes", type=int, default=1024)
    parser.add_argument("--pack-bytes", type=int, default=64 * 1024)
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()

    import ray

    from tierload.config.loading import load_config
    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload_tools.s3local import LocalS3

    workdir = tempfile.mkdtemp(prefix="tierload-random-access-")
    with LocalS3() as s3:
        fs = s3.create_bucket("random-access")
        fs.pipe({f"random-access/ds/{i // 500}/obj-{i:06d}.bin": os.urandom(args.object_bytes)
                 for i in range(args.objects)})
        fs.invalidate_cache()
        ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=200 * 2**20, namespace="tierload", log_to_driver=False, configure_logging=False)
        config = load_config({
            "hot": {"dir": f"{workdir}/hot", "capacity_bytes": 64 * 2**20},
            "warm": {"url": None, "capacity_bytes": 0},
            "manifest": {"cache_dir": f"{workdir}/manifests", "pack_threshold_bytes": 4 * args.object_bytes,
                         "pack_target_bytes": args.pack_bytes}})
        try:
            dataset = TieredDataset("s3://random-access/ds", config, layout="files",
                                    storage_options=s3.storage_options)
            manifest = dataset.manifest
            picks = np.random.default_rng(0).choice(manifest.num_samples, args.reads, replace=False)
            touched = sorted(set(manifest.sample_block[picks].tolist()))
            print(f"setup: {manifest.num_samples} objects of {args.object_bytes} B in {manifest.num_packs} packs "
                  f"(~{args.pack_bytes} B), local moto S3 (no emulated latency), {args.reads} random ds[i]")

            def timed_reads() -> tuple[dict, float]:
                before = dataset.cache_stats()["counters"]
                started = time.perf_counter()
                for index in picks:
                    dataset[int(index)]
                seconds = time.perf_counter() - started
                after = dataset.cache_stats()["counters"]
                counted = ("cold_gets", "cold_bytes", "random_reads")
                return {name: after[name] - before[name] for name in counted}, seconds

            cold, cold_s = timed_reads()
            whole = sum(manifest.blocks[block].length for block in touched)
            print(f"nothing cached: {cold['cold_gets']} GETs, {cold['cold_bytes']} B from S3 (their {len(touched)} "
                  f"packs read whole: {whole} B); {cold_s / args.reads * 1e3:.2f} ms per ds[i]")
            list(dataset)  # one epoch: every pack goes hot
            hot, hot_s = timed_reads()
            print(f"after an epoch: {hot['cold_gets']} GETs, {hot['random_reads']} node cache calls; "
                  f"{hot_s / args.reads * 1e3:.3f} ms per ds[i]")
        finally:
            stop_actors(config)
            ray.shutdown()


if __name__ == "__main__":
    main()
