"""RSS of the training process over many epochs with a small hot tier: it must stay flat.

    python benchmarks/rss_epochs.py                    # 20 epochs, prints RSS per epoch, exit 1 on growth
    python benchmarks/rss_epochs.py --epochs 50 --samples 2000 --num-workers 2

Setup (printed with the numbers): a local S3 server (moto) with ``--samples`` raw objects of
``--size`` bytes, a hot tier of ``--hot`` bytes (a small fraction of the data set, so blocks are
evicted and refetched every epoch), no warm tier, a local Ray. Each epoch iterates the whole
dataset through a DataLoader; after each epoch the training process's RSS is read (psutil).

Bound: RSS after the last epoch may exceed RSS after the warm-up epochs (the first
``--warmup``; imports, Ray's client, allocator pools) by at most ``--bound`` bytes (default
16 MiB, a few hundred times smaller than what a leak of one block per sample would add).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierload.units import parse_bytes  # noqa: E402


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def measure(s3, workdir: Path, *, epochs: int = 20, samples: int = 400, size: int = 4096, hot: int = 256 * 1024,
            num_workers: int = 0, batch_size: int = 16, bucket: str = "rss") -> list[int]:
    """Run ``epochs`` epochs and return the RSS (bytes) after each one.

    Args:
        s3: A running :class:`tierload_tools.s3local.LocalS3`.
        workdir: Where the tiers and manifests live.
    """
    from torch.utils.data import DataLoader

    from tierload import TieredDataset, collate

    fs = s3.create_bucket(bucket)
    for index in range(samples):
        fs.pipe_file(f"{bucket}/ds/{index:06d}.bin", index.to_bytes(8, "little") + bytes(size - 8))
    fs.invalidate_cache()
    config = {"hot": {"dir": str(workdir / "hot"), "capacity_bytes": hot}, "warm": {"url": None},
              "manifest": {"cache_dir": str(workdir / "manifests")}, "prefetch": {"depth_blocks": 16}}
    dataset = TieredDataset(f"s3://{bucket}/ds", config, layout="files", batch_size=batch_size,
                            storage_options=s3.storage_options)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate,
                        persistent_workers=num_workers > 0)
    readings = []
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        count = sum(len(batch) for batch, _labels in loader)
        assert count == samples, f"epoch {epoch} yielded {count} samples, expected {samples}"
        gc.collect()
        readings.append(rss_bytes())
    from tierload.deploy.runtime import stop_actors

    stop_actors(dataset.config)
    return readings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--hot", default="256KiB")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--bound", default="16MiB")
    args = parser.parse_args(argv)
    import tempfile

    from tierload_tools.s3local import LocalS3

    hot, bound = parse_bytes(args.hot), parse_bytes(args.bound)
    print(json.dumps({"setup": {"epochs": args.epochs, "samples": args.samples, "size": args.size, "hot_bytes": hot,
                                "dataset_bytes": args.samples * args.size, "num_workers": args.num_workers,
                                "bound_bytes": bound}}))
    began = time.perf_counter()
    with LocalS3() as s3, tempfile.TemporaryDirectory() as tmp:
        readings = measure(s3, Path(tmp), epochs=args.epochs, samples=args.samples, size=args.size, hot=hot,
                           num_workers=args.num_workers)
    for epoch, value in enumerate(readings):
        print(f"epoch {epoch:3d}  rss {value / 2**20:8.1f} MiB")
    growth = max(readings[args.warmup:]) - readings[args.warmup - 1]
    print(json.dumps({"rss_after_warmup_mib": round(readings[args.warmup - 1] / 2**20, 1),
                      "max_growth_after_warmup_mib": round(growth / 2**20, 2), "bound_mib": bound / 2**20,
                      "seconds": round(time.perf_counter() - began, 1), "flat": growth <= bound}))
    return 0 if growth <= bound else 1


if __name__ == "__main__":
    raise SystemExit(main())
