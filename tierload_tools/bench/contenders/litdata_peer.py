"""Contender: LitData (``litdata``), run from the peers' environment.

Conversion: ``litdata.optimize()`` writes the JPEG bytes and labels as chunks to
``s3://<bucket>/litdata`` (through the emulated S3); each input is a batch of 64 keys fetched
16 at a time, so the conversion runs at the link's speed. Run: ``StreamingDataset`` with
``max_cache_size`` = the hot capacity and ``shuffle=True``, through LitData's
``StreamingDataLoader``; JPEGs are decoded in ``__getitem__`` like every contender's.
"""

from __future__ import annotations

import os
import time

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.contenders._convert import DecodedItems, read_sources, shard_bytes
from tierload_tools.bench.loop import run_epochs

BATCH = 64
_CTX: Context | None = None  # set in the converting process; optimize() forks its workers


def remote(ctx: Context) -> str:
    return f"s3://{ctx.dataset.bucket}/litdata"


def _allow_http() -> None:
    """LitData moves chunks through obstore, which refuses plain http:// endpoints (real S3 is
    https) and ignores ``AWS_ALLOW_HTTP``; its client options are one module-level dict."""
    from litdata.streaming import downloader

    options = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
    if isinstance(options, dict):
        options["allow_http"] = "true"


def _fetch(indices: list[int]):
    assert _CTX is not None, "set by the converting process before optimize() forks"
    for data, label in read_sources(_CTX, indices):
        yield {"image": data, "label": int(label)}


def convert(ctx: Context) -> dict:
    from litdata import optimize

    global _CTX
    _CTX = ctx
    _allow_http()
    started = time.perf_counter()
    count = len(ctx.dataset.keys)
    inputs = [list(range(start, min(start + BATCH, count))) for start in range(0, count, BATCH)]
    optimize(fn=_fetch, inputs=inputs, output_dir=remote(ctx), chunk_bytes=shard_bytes(ctx),
             num_workers=min(2, len(inputs)), storage_options=ctx.boto_options, start_method="fork",
             verbose=False)
    return {"seconds": time.perf_counter() - started, "shard_bytes": shard_bytes(ctx)}


def run(ctx: Context) -> dict:
    from litdata import StreamingDataLoader, StreamingDataset

    class Decoded(DecodedItems, StreamingDataset):
        pass

    _allow_http()
    started = time.perf_counter()
    workload = ctx.workload
    dataset = Decoded(input_dir=remote(ctx), cache_dir=os.path.join(ctx.workdir, "litdata-cache"), shuffle=True,
                      seed=workload.seed, max_cache_size=ctx.hot_bytes, storage_options=ctx.boto_options)
    loader = StreamingDataLoader(dataset, batch_size=workload.batch_size, num_workers=workload.num_workers)
    setup_s = time.perf_counter() - started
    epochs = run_epochs(workload, ctx.dataset, ctx.endpoint_url, lambda epoch: loader)
    return {"setup_s": setup_s, "epochs": epochs,
            "notes": f"chunks of <= {shard_bytes(ctx) / 2**20:.0f} MiB, max_cache_size {ctx.hot_bytes / 1e6:.0f} MB"}
