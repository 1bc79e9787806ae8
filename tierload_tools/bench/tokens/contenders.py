"""The token workload's contenders in tierload's environment, each run in its own process.

* ``memmap-local``: the upper bound: the token files on local disk, memory-mapped
  (``np.memmap``), a map-style ``Dataset`` whose item ``k`` is window ``k`` of the stream as an
  int64 tensor, under a shuffling ``DataLoader``.
* ``tierload-tokens``: ``TieredDataset(layout="tokens")`` over the emulated S3, hot tier =
  ``hot_bytes``, warm tier disabled, its own local Ray and node cache (so it starts cold).

``python -m tierload_tools.bench.tokens.contenders NAME SETUP_JSON RESULT_JSON`` runs one; the setup
is a dict: ``paths`` (the local files), ``url``, ``storage_options``, ``endpoint_url``, ``seq_len``,
``epochs``, ``batch_size``, ``num_workers``, ``hot_bytes``, ``seed``, ``workdir``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from tierload_tools.bench.small.contenders import main as run_contender
from tierload_tools.bench.small.measure import MemoryWatch
from tierload_tools.bench.tokens.data import TokenStream
from tierload_tools.bench.tokens.measure import token_epochs


class MappedWindows(TorchDataset):
    """Item ``k``: window ``k`` of the memory-mapped stream, an int64 tensor of ``window`` tokens."""

    def __init__(self, stream: TokenStream) -> None:
        self.stream = stream

    def __len__(self) -> int:
        return self.stream.windows

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(self.stream.window_tokens(index).astype(np.int64))


def memmap_local(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    window = setup["seq_len"] + 1
    started = time.perf_counter()
    dataset = MappedWindows(TokenStream(setup["paths"], window))
    setup_s = time.perf_counter() - started
    workers = setup["num_workers"]
    loader = DataLoader(dataset, batch_size=setup["batch_size"], shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0, generator=torch.Generator().manual_seed(setup["seed"]))
    return {"setup_s": setup_s, "windows": len(dataset),
            "epochs": token_epochs(setup["epochs"], window, lambda epoch: loader)}


def tierload_tokens(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    import ray

    import tierload
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload.node.stats import hit_ratios

    work = setup["workdir"]
    config = load_config({
        "hot": {"dir": os.path.join(work, "hot"), "capacity_bytes": setup["hot_bytes"]},
        "warm": {"url": None},
        "manifest": {"cache_dir": os.path.join(work, "manifests"), "seq_len_tokens": setup["seq_len"]},
        "ray": {"num_cpus": os.cpu_count() or 1},
    })
    started = time.perf_counter()
    try:
        dataset = TieredDataset(setup["url"], config=config, layout="tokens", batch_size=setup["batch_size"],
                                seed=setup["seed"], storage_options=setup["storage_options"])
        setup_s = time.perf_counter() - started
        workers = setup["num_workers"]
        loader = DataLoader(dataset, batch_size=setup["batch_size"], num_workers=workers,
                            persistent_workers=workers > 0, collate_fn=tierload.collate)

        def for_epoch(epoch: int) -> DataLoader:
            dataset.set_epoch(epoch)
            return loader

        def extra(epoch: int) -> dict[str, Any]:
            stats = dataset.epoch_stats(epoch)
            return {"hot_hit_ratio": hit_ratios(stats)["hot"], "tierload_cold_gets": int(stats.get("cold_gets", 0)),
                    "tierload_cold_bytes": int(stats.get("cold_bytes", 0))}

        rows = token_epochs(setup["epochs"], setup["seq_len"] + 1, for_epoch, setup["endpoint_url"], extra)
        return {"setup_s": setup_s, "windows": dataset.manifest.num_samples, "blocks": len(dataset.manifest.blocks),
                "epochs": rows, "notes": f"hot {setup['hot_bytes'] / 1e6:.0f} MB, warm disabled"}
    finally:
        if ray.is_initialized():
            stop_actors(config)
            ray.shutdown()


CONTENDERS = {"memmap-local": memmap_local, "tierload-tokens": tierload_tokens}


if __name__ == "__main__":
    sys.exit(run_contender(sys.argv[1:], CONTENDERS))
