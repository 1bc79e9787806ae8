"""Contender: the plain s3fs DataLoader through fsspec's ``simplecache::`` on local disk.

The first read of an object downloads it whole to ``cache_storage``; later reads (any epoch,
any worker) open the local copy. simplecache has no capacity limit, so it keeps the whole
dataset: it is not held to the hot capacity the other contenders get.
"""

from __future__ import annotations

import os
import time

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.contenders.s3fs_plain import S3Images, loaders
from tierload_tools.bench.loop import run_epochs


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def run(ctx: Context) -> dict:
    started = time.perf_counter()
    cache = os.path.join(ctx.workdir, "simplecache")
    os.makedirs(cache, exist_ok=True)
    dataset = S3Images(ctx, cache_storage=cache)
    setup_s = time.perf_counter() - started
    epochs = run_epochs(ctx.workload, ctx.dataset, ctx.endpoint_url, loaders(ctx, dataset),
                        epoch_extra=lambda epoch: {"local_cache_bytes": _dir_bytes(cache)})
    return {"setup_s": setup_s, "epochs": epochs,
            "notes": "simplecache has no size limit: it kept "
                     f"{epochs[-1]['local_cache_bytes'] / max(1, ctx.dataset.total_bytes):.0%} of the dataset on disk"}
