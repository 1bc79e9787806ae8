"""The training loop every contender runs, and what it measures per epoch.

The loop takes a batch, then "computes" for ``workload.step_ms`` (it sleeps: the accelerator
would be busy, the CPU is not). Time spent in ``next(iterator)`` (including the first batch,
so worker start-up and cold first fetches count) is time the loop waited for data. S3
traffic is read from the emulated S3's counters before and after each epoch.

Imported by contender subprocesses, also from the peers' environment: standard library at the
top, nothing else.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable, Iterable

from tierload_tools.bench.emulated_s3 import read_counters
from tierload_tools.bench.link_timeline import epoch_link, read_timeline
from tierload_tools.bench.workload import Dataset, Workload

# Rows of the epochs finished so far in this process: a contender that fails mid-run still
# reports them (see tierload_tools.bench.contenders.__main__).
FINISHED: list[dict[str, Any]] = []


def _batch_size_of(batch: Any) -> int:
    labels = batch[1] if isinstance(batch, (tuple, list)) else batch["label"]
    return len(labels)


def s3_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Counter differences (``get_requests``, ``get_bytes``, ``list_requests``, ...)."""
    return {name: after.get(name, 0) - before.get(name, 0) for name in set(before) | set(after)
            if after.get(name, 0) - before.get(name, 0)}


def run_epochs(workload: Workload, dataset: Dataset, endpoint_url: str,
               loader_for_epoch: Callable[[int], Iterable],
               epoch_extra: Callable[[int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Run ``workload.epochs`` epochs through the loaders and measure each.

    Args:
        workload: Epochs and step time.
        dataset: The dataset (its byte count scales the hit ratio).
        endpoint_url: The emulated S3 (for its counters).
        loader_for_epoch: Returns the iterable of ``(images, labels)`` batches of an epoch.
        epoch_extra: Called after each epoch; its dict is merged into the epoch's row.

    Returns:
        One dict per epoch: ``epoch, samples, seconds, samples_per_s, stall_s, stall_fraction,
        s3_gets, s3_bytes, s3`` (all counters), ``byte_hit_ratio``, ``link`` (the link over the
        epoch: :func:`tierload_tools.bench.link_timeline.epoch_link`) and whatever ``epoch_extra`` adds.
    """
    step_s = workload.step_ms / 1000.0
    bytes_per_sample = dataset.mean_sample_bytes
    rows = []
    for epoch in range(workload.epochs):
        before = read_counters(endpoint_url)
        wall_start = time.time()
        start = time.perf_counter()
        waited, samples = 0.0, 0
        iterator = iter(loader_for_epoch(epoch))
        while True:
            asked = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                waited += time.perf_counter() - asked
                break
            waited += time.perf_counter() - asked
            samples += _batch_size_of(batch)
            del batch
            time.sleep(step_s)
        del iterator
        seconds = time.perf_counter() - start
        delta = s3_delta(before, read_counters(endpoint_url))
        link = epoch_link(read_timeline(endpoint_url, wall_start - 1.0, wall_start + seconds + 1.0), wall_start,
                          seconds)
        wanted = samples * bytes_per_sample
        row = {"epoch": epoch, "samples": samples, "seconds": seconds,
               "samples_per_s": samples / seconds if seconds else 0.0, "stall_s": waited,
               "stall_fraction": waited / seconds if seconds else 0.0,
               "s3_gets": delta.get("get_requests", 0), "s3_bytes": delta.get("get_bytes", 0), "s3": delta,
               # bytes the epoch consumed that did not come from S3 during it (clipped at 0)
               "byte_hit_ratio": max(0.0, 1.0 - delta.get("get_bytes", 0) / wanted) if wanted else 0.0,
               "link": link}
        if epoch_extra is not None:
            row.update(epoch_extra(epoch))
        rows.append(row)
        FINISHED.append(row)
        print(f"epoch {epoch + 1}: " + json.dumps(row), file=sys.stderr, flush=True)
    return rows
