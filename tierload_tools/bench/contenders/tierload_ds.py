"""Contender: tierload's ``TieredDataset`` with its default policy.

``tierload``: hot tier = the hot capacity, warm tier disabled. ``tierload-warm``: the same with
a warm tier (a local directory) larger than the dataset. Each run starts its own local Ray and
node cache, with tier directories in the run's scratch directory, so it starts cold.
Besides the loop's measures it reports tierload's own counters per epoch (hot/warm hit ratio,
cold bytes and GETs), its own data-stall figure (``tierload_stall_fraction``, measured by
:func:`tierload.watch`, beside the loop's ``stall_fraction``) and Belady's MIN hit ratio on the
same accesses at the same capacity (one per run of a block, as the hot-hit counter counts).
"""

from __future__ import annotations

import os
import time

from torch.utils.data import DataLoader

from tierload_tools.bench.belady import dataset_min_hit_ratios
from tierload_tools.bench.contenders import Context
from tierload_tools.bench.loop import run_epochs


def tierload_config(ctx: Context, warm: bool, s3_engine: str = "obstore"):
    from tierload.config.loading import load_config

    work = ctx.workdir
    return load_config({
        "hot": {"dir": os.path.join(work, "hot"), "capacity_bytes": ctx.hot_bytes},
        "warm": {"url": os.path.join(work, "warm") if warm else None,
                 "capacity_bytes": int(ctx.dataset.total_bytes * 1.25) + 2**20},
        "manifest": {"cache_dir": os.path.join(work, "manifests")},
        "ray": {"num_cpus": os.cpu_count() or 1},
        "cold": {"s3_engine": s3_engine},
    })


def run(ctx: Context) -> dict:
    import ray

    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload.loader.stall import watch
    from tierload.node.stats import hit_ratios

    started = time.perf_counter()
    workload = ctx.workload
    config = tierload_config(ctx, warm=ctx.name.endswith("-warm"),
                             s3_engine="aiobotocore" if ctx.name.endswith("-aiobotocore") else "obstore")
    try:
        dataset = TieredDataset(ctx.dataset.url, config=config, storage_options=ctx.s3fs_options,
                                batch_size=workload.batch_size, seed=workload.seed)
        setup_s = time.perf_counter() - started

        def for_epoch(epoch: int):
            dataset.set_epoch(epoch)
            # watch(): tierload's own stall figure, reported beside the loop's (tierload_stall_fraction)
            return watch(DataLoader(dataset, batch_size=workload.batch_size, num_workers=workload.num_workers))

        def extra(epoch: int) -> dict:
            stats = dataset.epoch_stats(epoch)
            ratios = hit_ratios(stats)
            return {"hot_hit_ratio": ratios["hot"], "staged_hit_ratio": ratios["staged"],
                    "warm_hit_ratio": ratios["warm"],
                    "tierload_cold_bytes": int(stats.get("cold_bytes", 0)),
                    "tierload_cold_gets": int(stats.get("cold_gets", 0)),
                    "tierload_stall_fraction": dataset.stall_stats()["epochs"][-1]["stall_fraction"]}

        epochs = run_epochs(workload, ctx.dataset, ctx.endpoint_url, for_epoch, extra)
        # MIN on the accesses the hot-hit counter counts (one per run of a block), not per sample
        reference = dataset_min_hit_ratios(dataset, workload.epochs, config.hot.capacity_bytes)
        for row, ratio in zip(epochs, reference.ratios, strict=True):
            row["min_hit_ratio"], row["min_exact"] = ratio, reference.exact
        return {"setup_s": setup_s, "epochs": epochs,
                "notes": f"hot {config.hot.capacity_bytes / 1e6:.0f} MB, warm "
                         + (f"{config.warm.capacity_bytes / 1e6:.0f} MB" if config.warm.url else "disabled")}
    finally:
        if ray.is_initialized():
            stop_actors(config)
            ray.shutdown()
