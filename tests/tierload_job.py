"""A training job in its own process, for tests of several jobs on one node cache.

Run as ``python tierload_job.py SPEC_JSON``. The spec names the dataset (``url``,
``storage_options``), the configuration, ``epochs``, ``seed``, ``num_workers``, a per-sample
``delay_s`` (a slow job), ``sample_size`` (the bytes of each object written by
``helpers.put_indexed_objects``), ``result`` (a JSON file written at the end) and
``exit_when`` (a file whose existence lets the job end; absent: end at once).

It prints one JSON line per event (``started``, ``epoch``) on stdout, checks every sample's
bytes, and records which samples each epoch yielded and the node cache's counters of its
streams. Its service host starts a local Ray only if it becomes the owner of the hot directory;
the job itself never imports Ray.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _own_stats(dataset, epoch: int) -> dict:
    """This job's counters of ``epoch`` (epoch_stats sums every job's streams of the dataset)."""
    mark = f"/s{dataset.seed}/e{epoch}/"
    totals: dict = {}
    dataset_id = dataset.manifest.dataset_id
    for row in dataset._link.call(lambda cache: cache.stream_stats(dataset_id), wait_s=30.0):
        if mark in row.stream_id:
            for name, value in (("lead_blocks", row.lead_blocks), ("lead_positions", row.lead_positions),
                                *row.counters.items()):
                totals[name] = totals.get(name, 0) + value
    return totals


def main(spec: dict) -> None:
    from torch.utils.data import DataLoader

    from tierload.deploy.host import has_ray
    from tierload.loader.dataset import TieredDataset

    dataset = TieredDataset(spec["url"], spec["config"], storage_options=spec["storage_options"], layout="files",
                            seed=spec["seed"], batch_size=1)
    # ray: Ray of its own, in this process or its service host; ray_imported: Ray in this process itself.
    _emit("started", cache_pid=dataset._endpoint.pid, ray=has_ray(), ray_imported="ray" in sys.modules,
          pid=os.getpid())
    size = spec["sample_size"]
    epochs, wrong = [], 0
    for epoch in range(spec["epochs"]):
        dataset.set_epoch(epoch)
        seen = []
        loader = DataLoader(dataset, batch_size=None, num_workers=spec["num_workers"])
        for sample, _label in loader:
            body = bytes(sample)
            index = int(body[:8].decode())
            wrong += body != f"{index:08d}".encode() + bytes(size - 8)
            seen.append(index)
            if spec["delay_s"]:
                time.sleep(spec["delay_s"])
        epochs.append({"seen": seen, "stats": _own_stats(dataset, epoch)})
        _emit("epoch", epoch=epoch, samples=len(seen))
    stats = dataset.cache_stats()
    result = {"epochs": epochs, "node_counters": stats["counters"], "wrong_bytes": wrong, "cache_pid": stats["pid"],
              "ray": has_ray(), "ray_imported": "ray" in sys.modules,
              "start_pid": dataset._endpoint.pid, "integrity_failures": stats["counters"].get("integrity_failures", 0),
              "consumer": dict(dataset.consumer_stats)}
    with open(spec["result"], "w") as handle:
        json.dump(result, handle)
    _emit("done")
    while spec.get("exit_when") and not os.path.exists(spec["exit_when"]):
        time.sleep(0.1)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
