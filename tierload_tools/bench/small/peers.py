"""The other loaders on the small-object workloads (issue 16): the S3 Connector for PyTorch and Ray Data.

Configured as on the default workload (see :mod:`tierload_tools.bench.contenders.s3torch` and
:mod:`tierload_tools.bench.contenders.raydata`, and benchmarks/README.md for why), with the small
workloads' batch size, workers and collate:

* ``s3torch-s3``: ``S3MapDataset.from_prefix`` (its listing is the start-up) under a shuffling
  ``DataLoader`` with persistent workers and :func:`~tierload_tools.bench.small.measure.collate_bytes`.
  On ``small-files`` it is not run: the connector reads S3 only.
* ``raydata-files`` / ``raydata-s3``: ``read_binary_files(shuffle="files", num_cpus=0.25)`` over
  the class folders (local directory, or the emulated S3 through pyarrow's ``S3FileSystem``),
  ``iter_batches(batch_format="numpy", prefetch_batches=2 x workers)``; each batch becomes
  ``(list of bytes, list of labels)`` like every contender's. Its own local Ray per run.

``python -m tierload_tools.bench.small.peers NAME SETUP_JSON RESULT_JSON`` runs one (the setup as in
:mod:`tierload_tools.bench.small.contenders`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader

from tierload_tools.bench.small.contenders import main as run_contender
from tierload_tools.bench.small.measure import MemoryWatch, collate_bytes, run_epochs

# contender -> (module that must import, workloads it cannot read with the reason)
REQUIRES = {"s3torch-s3": "s3torchconnector", "raydata-files": "ray.data", "raydata-s3": "ray.data"}
S3_ONLY = "not run: S3 only (the connector reads s3:// URIs, the workload is file://)"


def _endpoint(setup: dict[str, Any]) -> str:
    return setup["storage_options"]["client_kwargs"]["endpoint_url"]


def _bytes_and_label(reader: Any) -> tuple[bytes, int]:
    from tierload_tools.bench.contenders.s3torch import label_of

    return reader.read(), label_of(reader.key)


def s3torch(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    from tierload_tools.bench.contenders.s3torch import map_dataset

    options = setup["storage_options"]
    # the CRT client takes credentials from the environment (the workers inherit it)
    os.environ.update({"AWS_ACCESS_KEY_ID": options["key"], "AWS_SECRET_ACCESS_KEY": options["secret"]})
    started = time.perf_counter()
    dataset = map_dataset(setup["url"], _endpoint(setup), _bytes_and_label)
    samples = len(dataset)  # lists the prefix, in the parent
    setup_s = time.perf_counter() - started
    workers = setup["num_workers"]
    loader = DataLoader(dataset, batch_size=setup["batch_size"], shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0, collate_fn=collate_bytes,
                        generator=torch.Generator().manual_seed(setup["seed"]))
    return {"setup_s": setup_s, "epochs": run_epochs(setup["epochs"], lambda epoch: loader, watch),
            "samples": samples}


def _batches(dataset, batch_size: int, prefetch: int) -> Iterator[tuple[list[bytes], list[int]]]:
    for batch in dataset.iter_batches(batch_size=batch_size, batch_format="numpy", prefetch_batches=prefetch):
        yield list(batch["bytes"]), [int(path.rsplit("/", 2)[-2]) for path in batch["path"]]


def raydata(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    import ray
    import ray.data

    from tierload_tools.bench.contenders.raydata import READ_CPUS, s3_filesystem, start_ray

    started = time.perf_counter()
    start_ray()
    try:
        if "root" in setup:
            path, filesystem = setup["root"], None
        else:
            path = setup["url"].removeprefix("s3://").rstrip("/") + "/"
            filesystem = s3_filesystem(_endpoint(setup), setup["storage_options"])
        dataset = ray.data.read_binary_files(path, filesystem=filesystem, include_paths=True, shuffle="files",
                                             num_cpus=READ_CPUS)
        setup_s = time.perf_counter() - started
        prefetch = max(1, 2 * setup["num_workers"])
        rows = run_epochs(setup["epochs"], lambda epoch: _batches(dataset, setup["batch_size"], prefetch), watch)
        return {"setup_s": setup_s, "epochs": rows}
    finally:
        ray.shutdown()


CONTENDERS = {"s3torch-s3": s3torch, "raydata-files": raydata, "raydata-s3": raydata}


def missing_package(name: str) -> str | None:
    """None if ``name``'s package is installed, else why it cannot run."""
    import importlib.util

    module = REQUIRES[name]
    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError as exc:  # a parent package that does not import
        return f"not run: {module} does not import ({exc})"
    return None if found else f"not run: {module} is not installed (pip install -e '.[bench]')"


if __name__ == "__main__":
    sys.exit(run_contender(sys.argv[1:], CONTENDERS))
