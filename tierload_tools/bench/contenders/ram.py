"""Upper bound: every sample's bytes preloaded into the process's memory, decoded per access.

Preloading (16 concurrent s3fs GETs through the emulated link) is setup, outside the epochs;
the epochs then read no byte from S3 and cost only decoding, collation and the step time.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from torch.utils.data import Dataset as TorchDataset

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.contenders.s3fs_plain import loaders
from tierload_tools.bench.loop import run_epochs
from tierload_tools.bench.workload import decode_jpeg


class RamImages(TorchDataset):
    def __init__(self, blobs: list[bytes], labels: list[int]) -> None:
        self.blobs = blobs
        self.labels = labels

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, index: int):
        return decode_jpeg(self.blobs[index]), self.labels[index]


def run(ctx: Context) -> dict:
    import fsspec

    started = time.perf_counter()
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **ctx.s3fs_options)
    paths = [f"{ctx.dataset.bucket}/{key}" for key in ctx.dataset.keys]
    with ThreadPoolExecutor(16) as pool:
        blobs = list(pool.map(fs.cat_file, paths))
    dataset = RamImages(blobs, ctx.dataset.labels)
    setup_s = time.perf_counter() - started
    return {"setup_s": setup_s, "epochs": run_epochs(ctx.workload, ctx.dataset, ctx.endpoint_url,
                                                     loaders(ctx, dataset)),
            "notes": f"preloaded {sum(map(len, blobs)) / 1e6:.0f} MB in {setup_s:.1f} s (setup)"}
