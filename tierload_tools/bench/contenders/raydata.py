"""Contender: Ray Data, ``read_binary_files`` from S3 streamed into ``iter_torch_batches``.

Configured as Ray Data's documentation recommends for feeding training:
* streaming execution, no ``materialize()``: the workload's dataset is 4x the node's cache
  budget, and decoded it would be ~6x its JPEG bytes, more than Ray's object store;
* ``shuffle="files"`` at read time (the "Shuffling Data" guide's cheap option; here one file
  is one sample, so it shuffles every sample, anew each epoch) instead of ``random_shuffle()``,
  which the API reference calls slow and which materializes the whole dataset;
* ``num_cpus=0.25`` for the read (performance tips, "Tuning read resources": I/O-bound reads
  may run up to four tasks per CPU);
* decoding with ``map`` (the tips: ``map_batches`` only pays for vectorized transforms) with
  the same ``num_cpus``, so that Ray Data fuses it into the read tasks as the tips describe
  for a read followed by a map (it fuses only operators asking for the same resources);
* ``iter_torch_batches(prefetch_batches=2 x num_workers)``, the batches a ``DataLoader`` with
  ``num_workers`` workers keeps in flight (prefetch_factor 2).

Each run starts its own local Ray (``address="local"``: never another process's cluster). Several
ranks would use ``streaming_split``; this benchmark has one.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.loop import run_epochs
from tierload_tools.bench.workload import decode_jpeg_array

READ_CPUS = 0.25


def start_ray() -> None:
    """A fresh local Ray for this process only, without dashboard or progress bars."""
    import ray
    from ray.data import DataContext

    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
             _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False)
    DataContext.get_current().enable_progress_bars = False


def s3_filesystem(endpoint_url: str, credentials: dict):
    """A pyarrow ``S3FileSystem`` on the emulated S3 (Ray Data's default S3 client)."""
    import pyarrow.fs

    parts = urlsplit(endpoint_url)
    return pyarrow.fs.S3FileSystem(access_key=credentials["key"], secret_key=credentials["secret"],
                                   region="us-east-1", scheme=parts.scheme, endpoint_override=parts.netloc)


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    return {"image": decode_jpeg_array(row["bytes"]), "label": np.int64(row["path"].rsplit("/", 2)[-2])}


def images(ctx: Context):
    """The lazy dataset: every JPEG under the dataset's prefix, file order shuffled, decoded."""
    import ray.data

    prefix = f"{ctx.dataset.bucket}/{ctx.dataset.prefix}/"
    return ray.data.read_binary_files(prefix, filesystem=s3_filesystem(ctx.endpoint_url, ctx.credentials),
                                      include_paths=True, shuffle="files", num_cpus=READ_CPUS
                                      ).map(_decoded, num_cpus=READ_CPUS)


def run(ctx: Context) -> dict:
    import ray

    started = time.perf_counter()
    workload = ctx.workload
    start_ray()
    try:
        dataset = images(ctx)
        setup_s = time.perf_counter() - started
        prefetch = max(1, 2 * workload.num_workers)

        def for_epoch(epoch: int):
            return dataset.iter_torch_batches(batch_size=workload.batch_size, prefetch_batches=prefetch,
                                              device="cpu")

        epochs = run_epochs(workload, ctx.dataset, ctx.endpoint_url, for_epoch)
        return {"setup_s": setup_s, "epochs": epochs,
                "notes": f"streaming, shuffle='files', read num_cpus {READ_CPUS}, prefetch_batches {prefetch}, "
                         "no materialize (re-reads S3 every epoch)"}
    finally:
        ray.shutdown()
