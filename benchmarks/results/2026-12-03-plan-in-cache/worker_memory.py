"""Each DataLoader worker's own memory at 1.28 M keys, reading for real (not the startup bench's walk).

A ``TieredDataset`` over the ``file://`` prefix of ``make_files.py`` (manifest cached by an earlier
run in WORKDIR), a ``DataLoader`` with 2 workers and batch 64, iterated for SAMPLES samples of
epoch 0, then of epoch 1. Each worker samples its own RSS, USS and anonymous RSS every 50 ms in a
thread (``psutil.Process().memory_full_info()``, ``/proc/self/status``) and reports its peaks at each
epoch's end with the first sample of its last batch. The training process's figures are printed too.

``python worker_memory.py URL WORKDIR SAMPLES RESULT_JSON``
"""

from __future__ import annotations

import json
import sys
import threading
import time


def _status_mb(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


class Peaks:
    """This process's peak RSS, USS and anonymous RSS (MB), sampled every 50 ms."""

    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.rss = self.uss = self.anon = 0.0
        threading.Thread(target=self._run, daemon=True).start()

    def sample(self) -> None:
        info = self.process.memory_full_info()
        self.rss = max(self.rss, info.rss / 2**20)
        self.uss = max(self.uss, info.uss / 2**20)
        self.anon = max(self.anon, _status_mb("RssAnon"))

    def _run(self) -> None:
        while True:
            self.sample()
            time.sleep(0.05)


_peaks: Peaks | None = None


def _worker_init(_worker_id: int) -> None:
    global _peaks
    _peaks = Peaks()


def _collate(batch):
    peaks = _peaks  # set in a worker by _worker_init
    if peaks is None:
        return len(batch), None
    peaks.sample()
    return len(batch), {"rss": peaks.rss, "uss": peaks.uss, "anon": peaks.anon}


def main(url: str, workdir: str, samples: int, out: str) -> None:
    import torch  # noqa: F401 - as a user's process
    from torch.utils.data import DataLoader

    from tierload_tools.bench.small import startup as bench

    setup = {"url": url, "storage_options": {}, "workdir": workdir}
    config = bench._config(setup)
    main_peaks = Peaks()
    result: dict = {"epochs": []}
    try:
        from tierload.loader.dataset import TieredDataset

        dataset = TieredDataset(url, config=config, layout="files", batch_size=64)
        loader = DataLoader(dataset, batch_size=64, num_workers=2, collate_fn=_collate, worker_init_fn=_worker_init,
                            persistent_workers=True)
        for epoch in range(2):
            dataset.set_epoch(epoch)
            seen, last = 0, {}
            began = time.perf_counter()
            for batch_index, (count, peaks) in enumerate(loader):
                seen += count
                last[batch_index % 2] = peaks  # batches alternate between the two workers
                if seen >= samples:
                    break
            result["epochs"].append({"epoch": epoch, "samples": seen, "seconds": time.perf_counter() - began,
                                     "workers": [last.get(0), last.get(1)]})
        main_peaks.sample()
        result["main"] = {"rss": main_peaks.rss, "uss": main_peaks.uss, "anon": main_peaks.anon}
    finally:
        bench._shutdown(config)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
