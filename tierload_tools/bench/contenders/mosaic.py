"""Contender: MosaicML Streaming (``mosaicml-streaming``), run from the peers' environment.

Conversion: ``MDSWriter`` writes the JPEG bytes and labels as MDS shards to
``s3://<bucket>/mds`` (through the emulated S3). Run: ``StreamingDataset`` with
``cache_limit`` = the hot capacity, ``shuffle=True``, a plain ``DataLoader``; JPEGs are decoded
in ``__getitem__`` the same way every contender decodes them. Streaming reaches S3 with boto3,
pointed at the emulated endpoint by ``S3_ENDPOINT_URL``.

Streaming's defaults thrash a cache of 25% of the dataset: py1e shuffles over blocks of
262,144 samples (the whole dataset here), and each DataLoader worker reads ahead 8 batches, so
shards are evicted before their last sample is read and downloaded again (12x the dataset per
epoch on the quick workload; >6 GB in 10 minutes for a 1 GB dataset on the full one, where it
would not finish), and with the read-ahead larger than the cache a worker read a shard that had
just been evicted (``IndexError`` in ``mds_decode``). Both are per worker, so they are set so
that all workers' shuffle blocks fill at most half the cache (``shuffle_block_size``) and all
workers' read-ahead at most a quarter (``predownload``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.contenders._convert import DecodedItems, read_sources, shard_bytes
from tierload_tools.bench.loop import run_epochs


def remote(ctx: Context) -> str:
    return f"s3://{ctx.dataset.bucket}/mds"


def _cache_samples(ctx: Context) -> tuple[int, int]:
    """(samples per shard, samples the cache holds, per DataLoader worker)."""
    per_shard = max(1, int(shard_bytes(ctx) // ctx.dataset.mean_sample_bytes))
    cache_shards = max(1, ctx.hot_bytes // shard_bytes(ctx))
    return per_shard, per_shard * cache_shards // max(1, ctx.workload.num_workers)


def shuffle_block_samples(ctx: Context) -> int:
    """Samples per shuffle block: all workers' blocks fill at most half the cache."""
    per_shard, per_worker = _cache_samples(ctx)
    return max(per_shard, per_worker // 2)


def predownload_samples(ctx: Context) -> int:
    """Read-ahead per worker: Streaming's default (8 batches), capped so all workers' fill a quarter."""
    _, per_worker = _cache_samples(ctx)
    return max(1, min(8 * ctx.workload.batch_size, per_worker // 4))


def convert(ctx: Context) -> dict:
    from streaming import MDSWriter

    started = time.perf_counter()
    local = tempfile.mkdtemp(prefix="mds-", dir=ctx.convert_dir)
    try:
        with MDSWriter(out=(local, remote(ctx)), columns={"image": "bytes", "label": "int"},
                       size_limit=shard_bytes(ctx)) as writer:
            for data, label in read_sources(ctx):
                writer.write({"image": data, "label": int(label)})
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return {"seconds": time.perf_counter() - started, "shard_bytes": shard_bytes(ctx)}


def run(ctx: Context) -> dict:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    class Decoded(DecodedItems, StreamingDataset):
        pass

    started = time.perf_counter()
    clean_stale_shared_memory()
    workload = ctx.workload
    dataset = Decoded(remote=remote(ctx), local=os.path.join(ctx.workdir, "streaming-cache"), shuffle=True,
                      shuffle_seed=workload.seed, shuffle_block_size=shuffle_block_samples(ctx),
                      predownload=predownload_samples(ctx),
                      batch_size=workload.batch_size, cache_limit=ctx.hot_bytes)
    loader: DataLoader = DataLoader(dataset, batch_size=workload.batch_size, num_workers=workload.num_workers)
    setup_s = time.perf_counter() - started
    epochs = run_epochs(workload, ctx.dataset, ctx.endpoint_url, lambda epoch: loader)
    return {"setup_s": setup_s, "epochs": epochs,
            "notes": f"MDS shards of <= {shard_bytes(ctx) / 2**20:.0f} MiB, cache_limit {ctx.hot_bytes / 1e6:.0f} MB, "
                     f"shuffle_block_size {shuffle_block_samples(ctx)}, predownload {predownload_samples(ctx)} samples"}
