"""S3 requests per epoch: 2 jobs x 2 DataLoader workers on one node, tierload vs a plain loader.

Issue 24, item 4. The store counts requests, not bytes, against its limits (the Hugging Face Hub
blocked a team that made 100k requests in a minute), so this counts what reaches the store: the
emulated S3 (:mod:`tierload_tools.bench.emulated_s3`, in front of moto's server) counts object
GETs, LISTs and HEADs, and the GETs per 50 ms.

Contenders, each run as two jobs (two dataset objects, each iterated by its own thread through a
``DataLoader`` with 2 workers, the two at the same time) over the same objects:

* ``plain``: a torch ``Dataset`` over s3fs, each worker reading every object it is handed
  (``cat_file``: one GET each); each job lists the prefix once (``find``).
* ``tierload``: ``TieredDataset`` on one node cache (the second job joins the first's), hot tier
  large enough for the dataset, no warm tier.
* ``tierload`` with ``cold.max_requests_per_s``: the same, the node cache held under the limit.

Printed per run and epoch: GETs, LISTs, HEADs, the epoch's seconds, and the most GETs that
arrived in any 1 s window (sliding over the proxy's 50 ms bins). Run:
``nice python benchmarks/requests_per_epoch.py [--objects 400] [--rate 100]`` (one JSON line per
run, then a Markdown table).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings, read_counters
from tierload_tools.bench.link_timeline import read_timeline
from tierload_tools.s3local import LocalS3

JOBS, WORKERS, EPOCHS = 2, 2, 2


class PlainS3Files(Dataset):
    """Each object of a prefix as one sample, read whole by the worker that is handed it (s3fs)."""

    def __init__(self, paths: list[str], storage_options: dict) -> None:
        self.paths = paths
        self.storage_options = storage_options
        self._fs = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> int:
        if self._fs is None:  # one client per worker process, made there
            import s3fs

            self._fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)
        return len(self._fs.cat_file(self.paths[index]))


def _count(batch: list) -> int:
    return len(batch)


def _epochs(loaders: list[DataLoader], set_epoch) -> list[tuple[float, float]]:
    """Each epoch's (start, end) in ``time.time()`` seconds, every loader iterated at once."""
    spans = []
    for epoch in range(EPOCHS):
        set_epoch(epoch)
        start = time.time()
        threads = [threading.Thread(target=lambda loader=loader: [None for _ in loader]) for loader in loaders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        spans.append((start, time.time()))
    return spans


def _measure(endpoint: str, run) -> list[dict]:
    """Counters per epoch of ``run(before_epoch)``; ``before_epoch`` resets the proxy's counters."""
    rows: list[dict] = []

    def before_epoch(epoch: int) -> None:
        rows.append(read_counters(endpoint))  # before epoch 0: the set-up (listings, access checks)
        read_counters(endpoint, reset=True)

    spans = run(before_epoch)
    rows.append(read_counters(endpoint))
    setup = rows.pop(0)
    out = [{"epoch": "set-up", "gets": setup.get("get_requests", 0), "lists": setup.get("list_requests", 0),
            "heads": setup.get("head_requests", 0), "seconds": "", "peak_gets_per_s": ""}]
    for epoch, ((start, end), counters) in enumerate(zip(spans, rows, strict=True)):
        gets = read_timeline(endpoint, start, end)["gets"]
        peak = max((sum(gets[i:i + 20]) for i in range(max(1, len(gets) - 19))), default=0)
        out.append({"epoch": epoch, "gets": counters.get("get_requests", 0), "lists": counters.get("list_requests", 0),
                    "heads": counters.get("head_requests", 0), "seconds": round(end - start, 2),
                    "peak_gets_per_s": peak})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=400)
    parser.add_argument("--size", type=int, default=4096, help="bytes per object")
    parser.add_argument("--rate", type=float, default=100.0, help="cold.max_requests_per_s of the limited run")
    args = parser.parse_args()
    import ray

    from tierload import TieredDataset, load_config
    from tierload.deploy.runtime import stop_actors

    link = LinkSettings(latency_ms=20.0, connection_mb_s=0, total_mb_s=0)
    results = []
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, link) as proxy, tempfile.TemporaryDirectory() as tmp:
        fs = s3.create_bucket("requests")
        fs.pipe({f"requests/ds/{i:06d}.bin": bytes([i % 256]) * args.size for i in range(args.objects)})
        options = {**s3.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint_url,
                                                           "region_name": "us-east-1"}}
        setup = f"{args.objects} objects x {args.size} B, {JOBS} jobs x {WORKERS} workers, {link.describe()}"

        def plain(before_epoch):
            import s3fs

            read_counters(proxy.endpoint_url, reset=True)
            lister = s3fs.S3FileSystem(skip_instance_cache=True, **options)
            jobs = []
            for _ in range(JOBS):
                lister.invalidate_cache()
                jobs.append(PlainS3Files(sorted(lister.find("requests/ds")), options))
            generator = torch.Generator()
            loaders = [DataLoader(job, batch_size=16, shuffle=True, num_workers=WORKERS, generator=generator,
                                  persistent_workers=False) for job in jobs]
            return _epochs(loaders, before_epoch)

        results.append({"run": "plain", "epochs": _measure(proxy.endpoint_url, plain)})

        ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 object_store_memory=200 * 2**20, log_to_driver=False, configure_logging=False)
        for name, rate in (("tierload", None), (f"tierload, cold.max_requests_per_s={args.rate:g}", args.rate)):
            root = Path(tmp) / name.split(",")[0].replace(" ", "") / str(rate)
            config = load_config({"hot": {"dir": str(root / "hot"), "capacity_bytes": "1GiB"},
                                  "warm": {"url": None, "capacity_bytes": 0},
                                  "manifest": {"cache_dir": str(root / "manifests")},
                                  "cold": {"max_requests_per_s": rate}, "metrics": {"enabled": False}})

            def tiered(before_epoch, config=config):
                read_counters(proxy.endpoint_url, reset=True)
                jobs = [TieredDataset("s3://requests/ds", config, layout="files", storage_options=options)
                        for _ in range(JOBS)]
                loaders = [DataLoader(job, batch_size=16, num_workers=WORKERS, collate_fn=_count) for job in jobs]
                try:
                    return _epochs(loaders, lambda epoch: ([job.set_epoch(epoch) for job in jobs],
                                                           before_epoch(epoch)))
                finally:
                    stop_actors(config)

            results.append({"run": name, "epochs": _measure(proxy.endpoint_url, tiered)})
        ray.shutdown()
    for row in results:
        print(json.dumps({"setup": setup, **row}))
    print(f"\n{setup}\n")
    print("| loader | epoch | GETs | LISTs | HEADs | seconds | most GETs in 1 s |")
    print("|---|---|---|---|---|---|---|")
    for row in results:
        for figures in row["epochs"]:
            print(f"| {row['run']} | {figures['epoch']} | {figures['gets']} | {figures['lists']} | {figures['heads']} | "
                  f"{figures['seconds']} | {figures['peak_gets_per_s']} |")


if __name__ == "__main__":
    main()
