"""The mixture workload's contender, run in its own process: ``TieredDataset([Source, Source])``.

``python -m tierload_tools.bench.mixture.contender tierload-mixture SETUP_JSON RESULT_JSON``. The setup
is a dict: ``sources`` (``[{"url", "weight"}, ...]``), ``storage_options``, ``endpoint_url``,
``epochs``, ``batch_size``, ``num_workers``, ``hot_bytes``, ``seed``, ``workdir``.

Per epoch: samples/s (the loop does no other work), samples per source, the node's accesses and
hot hits and its hot hit ratio, Belady's MIN on the same accesses at the same capacity (optimal
over the whole run when the objects have one size: one epoch alone may see a hit MIN takes in the next)
(:func:`tierload_tools.bench.belady.dataset_min_hit_ratios`), and the emulated S3's GETs and bytes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from typing import Any

from tierload_tools.bench.emulated_s3 import read_counters
from tierload_tools.bench.loop import s3_delta
from tierload_tools.bench.small.contenders import main as run_contender
from tierload_tools.bench.small.measure import MemoryWatch


def tierload_mixture(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    import ray
    from torch.utils.data import DataLoader

    import tierload
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload.loader.mixture_sources import Source
    from tierload.node.stats import hit_ratios
    from tierload_tools.bench.belady import dataset_min_hit_ratios

    work = setup["workdir"]
    config = load_config({
        "hot": {"dir": os.path.join(work, "hot"), "capacity_bytes": setup["hot_bytes"]},
        "warm": {"url": None},
        "manifest": {"cache_dir": os.path.join(work, "manifests"), "pack_target_bytes": 0},
        "ray": {"num_cpus": os.cpu_count() or 1},
    })
    sources = [Source(entry["url"], entry["weight"], "files", storage_options=setup["storage_options"])
               for entry in setup["sources"]]
    started = time.perf_counter()
    try:
        dataset = TieredDataset(sources, config=config, batch_size=setup["batch_size"], seed=setup["seed"])
        setup_s = time.perf_counter() - started
        workers = setup["num_workers"]
        loader = DataLoader(dataset, batch_size=setup["batch_size"], num_workers=workers,
                            persistent_workers=workers > 0, collate_fn=tierload.collate)
        reference = dataset_min_hit_ratios(dataset, setup["epochs"], setup["hot_bytes"])
        rows = []
        for epoch in range(setup["epochs"]):
            dataset.set_epoch(epoch)
            before = read_counters(setup["endpoint_url"])
            per_source: Counter = Counter()
            began = time.perf_counter()
            for _, _, source in loader:
                per_source.update(source.tolist())
            seconds = time.perf_counter() - began
            delta = s3_delta(before, read_counters(setup["endpoint_url"]))
            stats = dataset.epoch_stats(epoch)
            samples = sum(per_source.values())
            row = {"epoch": epoch, "samples": samples, "seconds": seconds,
                   "samples_per_s": samples / seconds if seconds else 0.0,
                   "per_source": {str(k): v for k, v in sorted(per_source.items())},
                   "accesses": int(stats.get("accesses", 0)), "hot_hits": int(stats.get("hot_hits", 0)),
                   "hot_hit_ratio": hit_ratios(stats)["hot"], "min_hit_ratio": reference.ratios[epoch],
                   "min_exact": reference.exact,
                   "s3_gets": delta.get("get_requests", 0), "s3_bytes": delta.get("get_bytes", 0)}
            rows.append(row)
            print(f"epoch {epoch + 1}: " + json.dumps(row), file=sys.stderr, flush=True)
        return {"setup_s": setup_s, "samples_per_epoch": len(dataset), "blocks": len(dataset.manifest.blocks),
                "epochs": rows, "notes": f"hot {setup['hot_bytes'] / 1e6:.1f} MB, warm disabled"}
    finally:
        if ray.is_initialized():
            stop_actors(config)
            ray.shutdown()


CONTENDERS = {"tierload-mixture": tierload_mixture}


if __name__ == "__main__":
    sys.exit(run_contender(sys.argv[1:], CONTENDERS))
