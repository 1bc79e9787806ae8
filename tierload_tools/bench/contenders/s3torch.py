"""Contender: the Amazon S3 Connector for PyTorch (``s3torchconnector``), map-style.

Configured as its README recommends for training with random access: ``S3MapDataset.from_prefix``
(it lists the prefix once, timed as setup) under a shuffling ``DataLoader`` with ``num_workers``
processes; each worker makes its own AWS CRT client after the fork (the connector releases the
parent's client before forking). The default reader (``S3ReaderConstructor.sequential``: one GET
streams the whole object) suits whole-object reads; the ranged reader is for partial reads. The
client config keeps the library's defaults (10 Gbps target, 8 MiB parts: every JPEG is one GET)
except ``force_path_style``, which the emulated S3 on 127.0.0.1 needs. No local cache: every
epoch reads every byte again. JPEGs are decoded in the transform, like every contender's.
"""

from __future__ import annotations

import time
from typing import Any

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.contenders.s3fs_plain import loaders
from tierload_tools.bench.loop import run_epochs
from tierload_tools.bench.workload import decode_jpeg

REGION = "us-east-1"


def label_of(key: str) -> int:
    """Class of an image-folder key ``<prefix>/<label>/<n>.jpg``.

    Raises:
        ValueError: The folder above the file is not an integer.
    """
    return int(key.rsplit("/", 2)[-2])


def decoded_sample(reader: Any) -> tuple[Any, int]:
    """The dataset's transform: an ``S3Reader`` -> (uint8 tensor (3, H, W), label)."""
    return decode_jpeg(reader.read()), label_of(reader.key)


def map_dataset(url: str, endpoint_url: str, transform):
    """``S3MapDataset.from_prefix(url)`` against ``endpoint_url`` (path-style, as a local endpoint needs)."""
    from s3torchconnector import S3ClientConfig, S3MapDataset

    prefix = url if url.endswith("/") else url + "/"
    return S3MapDataset.from_prefix(prefix, region=REGION, endpoint=endpoint_url,
                                    s3client_config=S3ClientConfig(force_path_style=True), transform=transform)


def run(ctx: Context) -> dict:
    started = time.perf_counter()
    dataset = map_dataset(ctx.dataset.url, ctx.endpoint_url, decoded_sample)
    listed = len(dataset)  # the listing happens here, in the parent, before the workers fork
    if listed != len(ctx.dataset.keys):
        raise RuntimeError(f"S3MapDataset listed {listed} objects under {ctx.dataset.url}; "
                           f"{len(ctx.dataset.keys)} were uploaded")
    setup_s = time.perf_counter() - started
    return {"setup_s": setup_s, "epochs": run_epochs(ctx.workload, ctx.dataset, ctx.endpoint_url,
                                                     loaders(ctx, dataset)),
            "notes": "S3MapDataset, sequential reader, default S3ClientConfig (+ path style), no cache"}
