"""Time to the first batch after an elastic resume, with and without the warm resume.

    python benchmarks/warm_resume.py            # prints the setup and a Markdown table

Setup (printed): a local S3 server (moto) behind the emulated remote link
(:mod:`tierload_tools.bench.emulated_s3`: first-byte latency, per-connection and total
bandwidth caps) holding ``--objects`` files of ``--object-kib`` KiB (one block each). A job
at 2 ranks stops rank 0 after 3 batches and saves its state; each measured run then starts
rank 0 of 4 ranks from that state on a fresh node cache with an empty hot tier (no warm
tier), calls ``load_state_dict(state, warm=...)``, spends ``--setup-s`` seconds as a job does
between loading its checkpoint and its first step (model and optimizer restore: here a
sleep), builds a DataLoader with ``--workers`` workers and times ``next()`` until the first
batch (and the first ``--batches``). ``--repeats`` runs per mode; the medians are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(endpoint: dict, workdir: Path, state: dict, *, warm: bool, run: int, args) -> dict:
    from torch.utils.data import DataLoader

    from tierload import TieredDataset, collate
    from tierload.deploy.runtime import stop_actors

    config = {"hot": {"dir": str(workdir / f"hot-{int(warm)}-{run}"), "capacity_bytes": "1GiB"},
              "warm": {"url": None}, "manifest": {"cache_dir": str(workdir / "manifests"), "pack_target_bytes": 0}}
    dataset = TieredDataset("s3://resume/ds", config, layout="files", batch_size=args.batch, rank=0, world_size=4,
                            storage_options=endpoint)
    try:
        dataset.load_state_dict(state, warm=warm)
        time.sleep(args.setup_s)  # the job restores its model and optimizer meanwhile
        began = time.perf_counter()
        loader = DataLoader(dataset, batch_size=args.batch, num_workers=args.workers, collate_fn=collate,
                            prefetch_factor=2 if args.workers else None)
        iterator = iter(loader)
        next(iterator)
        first = time.perf_counter() - began
        for _ in range(args.batches - 1):
            next(iterator)
        more = time.perf_counter() - began
        del iterator
        stats = dataset.own_epoch_stats(state["epoch"])
        return {"first_s": first, "batches_s": more, "cold_gets": int(stats.get("cold_gets", 0))}
    finally:
        stop_actors(dataset.config)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=256)
    parser.add_argument("--object-kib", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--setup-s", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--connection-mb-s", type=float, default=8.0)
    parser.add_argument("--total-mb-s", type=float, default=32.0)
    args = parser.parse_args(argv)
    from torch.utils.data import DataLoader

    from tierload import TieredDataset, collate
    from tierload.deploy.runtime import stop_actors
    from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
    from tierload_tools.s3local import LocalS3

    link = LinkSettings(args.latency_ms, args.connection_mb_s, args.total_mb_s)
    print(json.dumps({"setup": vars(args) | {"link": link.describe()}}))
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, link) as emulated, tempfile.TemporaryDirectory() as tmp:
        fs = s3.create_bucket("resume")
        for index in range(args.objects):
            fs.pipe_file(f"resume/ds/obj-{index:06d}.bin", bytes(args.object_kib * 1024))
        fs.invalidate_cache()
        options = s3.storage_options
        endpoint = {**options, "client_kwargs": {**options["client_kwargs"], "endpoint_url": emulated.endpoint_url}}
        workdir = Path(tmp)
        config = {"hot": {"dir": str(workdir / "hot-first"), "capacity_bytes": "1GiB"}, "warm": {"url": None},
                  "manifest": {"cache_dir": str(workdir / "manifests"), "pack_target_bytes": 0}}
        first = TieredDataset("s3://resume/ds", config, layout="files", batch_size=args.batch, rank=0, world_size=2,
                              storage_options=endpoint)
        iterator = iter(DataLoader(first, batch_size=args.batch, collate_fn=collate))
        for _ in range(3):
            next(iterator)
        state = first.state_dict()
        del iterator
        stop_actors(first.config)
        rows = {}
        for warm in (False, True):
            runs = [measure(endpoint, workdir, state, warm=warm, run=run, args=args) for run in range(args.repeats)]
            rows[warm] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            print(json.dumps({"warm": warm, "runs": runs}))
    print(f"\n| resume | first batch s (median of {args.repeats}) | first {args.batches} batches s | "
          "cold GETs of the epoch so far |\n|---|---|---|---|")
    for warm, row in rows.items():
        print(f"| {'warm' if warm else 'cold'} | {row['first_s']:.3f} | {row['batches_s']:.3f} | {row['cold_gets']} |")


if __name__ == "__main__":
    main()
