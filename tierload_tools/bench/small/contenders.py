"""The small-object contenders, each run in its own process by :mod:`tierload_tools.bench.small.run`.

* ``plain-files``: what a user writes first: list the class folders, then a map-style
  ``Dataset`` whose ``__getitem__`` reads one file, under a shuffling ``DataLoader``.
* ``tierload-files`` / ``tierload-s3``: ``TieredDataset(layout="files")`` over the same
  files (``file://``) or the emulated S3; hot tier larger than the dataset, warm tier
  disabled, a local Ray and node cache of its own (so it starts cold).

Every contender uses the same batch size, workers (persistent, so a worker's memory can be
followed over epochs) and :func:`~tierload_tools.bench.small.measure.collate_bytes`.
``python -m tierload_tools.bench.small.contenders NAME SETUP_JSON RESULT_JSON`` runs one; the setup
is a dict: ``root`` or ``url``, ``epochs``, ``batch_size``, ``num_workers``, ``workdir``,
``total_bytes``, ``storage_options``, ``seed``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from tierload_tools.bench.small.measure import MemoryWatch, collate_bytes, run_epochs


class FileSamples(TorchDataset):
    """Sample ``i``: the bytes of ``paths[i]``, labelled ``labels[i]``."""

    def __init__(self, paths: list[str], labels: list[int]) -> None:
        self.paths, self.labels = paths, labels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        with open(self.paths[index], "rb") as file:
            return file.read(), self.labels[index]


def list_files(root: str) -> tuple[list[str], list[int]]:
    """Every file below ``root``'s class folders, sorted, with its class index."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    paths, labels = [], []
    for label, name in enumerate(classes):
        names = sorted(entry.name for entry in os.scandir(os.path.join(root, name)) if entry.is_file())
        paths += [os.path.join(root, name, file) for file in names]
        labels += [label] * len(names)
    return paths, labels


def plain_files(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    started = time.perf_counter()
    dataset = FileSamples(*list_files(setup["root"]))
    setup_s = time.perf_counter() - started
    loader = DataLoader(dataset, batch_size=setup["batch_size"], shuffle=True, num_workers=setup["num_workers"],
                        persistent_workers=setup["num_workers"] > 0, collate_fn=collate_bytes,
                        generator=torch.Generator().manual_seed(setup["seed"]))
    return {"setup_s": setup_s, "epochs": run_epochs(setup["epochs"], lambda epoch: loader, watch)}


def tierload_config(setup: dict[str, Any]):
    from tierload.config.loading import load_config

    work = setup["workdir"]
    return load_config({
        "hot": {"dir": os.path.join(work, "hot"), "capacity_bytes": 2 * setup["total_bytes"] + 2**28},
        "warm": {"url": None},
        "manifest": {"cache_dir": os.path.join(work, "manifests")},
        "ray": {"num_cpus": os.cpu_count() or 1},
        "cold": {"s3_engine": setup.get("s3_engine", "obstore")},
    })


def tierload_dataset(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    import ray

    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload.node.stats import hit_ratios

    config = tierload_config(setup)
    started = time.perf_counter()
    try:
        dataset = TieredDataset(setup["url"], config=config, layout="files", batch_size=setup["batch_size"],
                                seed=setup["seed"], storage_options=setup.get("storage_options") or None)
        setup_s = time.perf_counter() - started
        loader = DataLoader(dataset, batch_size=setup["batch_size"], num_workers=setup["num_workers"],
                            persistent_workers=setup["num_workers"] > 0, collate_fn=collate_bytes)

        def for_epoch(epoch: int) -> DataLoader:
            dataset.set_epoch(epoch)
            return loader

        def extra(epoch: int) -> dict[str, Any]:
            stats = dataset.epoch_stats(epoch)
            return {"hot_hit_ratio": hit_ratios(stats)["hot"], "cold_gets": int(stats.get("cold_gets", 0)),
                    "cold_bytes": int(stats.get("cold_bytes", 0))}

        rows = run_epochs(setup["epochs"], for_epoch, watch, extra)
        return {"setup_s": setup_s, "epochs": rows, "samples": dataset.manifest.num_samples}
    finally:
        if ray.is_initialized():
            stop_actors(config)
            ray.shutdown()


CONTENDERS = {"plain-files": plain_files, "tierload-files": tierload_dataset, "tierload-s3": tierload_dataset,
              "tierload-s3-aiobotocore": tierload_dataset}


def main(argv: list[str], contenders: dict[str, Any] | None = None) -> int:
    """Run contender ``argv[0]`` of ``contenders`` (default: this module's) and write its result."""
    name, setup_path, result_path = argv
    setup = json.loads(Path(setup_path).read_text(encoding="utf-8"))
    try:
        with MemoryWatch(interval_s=1.0) as watch:
            result = (contenders or CONTENDERS)[name](setup, watch)
            result["peak_rss_main_mb"] = watch.mark()["peak_rss_main_mb"]
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - reported in the result, with its traceback
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
