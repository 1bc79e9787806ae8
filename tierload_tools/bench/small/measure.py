"""What the small-object contenders measure: epochs, the main process's memory, the workers'.

No simulated compute: the loop only takes batches, so samples/s is the loader's own rate.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Iterable

import psutil

from tierload.data.manifest_helper import PROCESS_NAME as MANIFEST_HELPER_NAME


def collate_bytes(batch: list[tuple[Any, int]]) -> tuple[list[Any], list[int]]:
    """A batch of ``(sample, label)`` pairs -> ``(samples, labels)``, both plain lists.

    The same for every contender, and nearly free, so it does not hide a loader's cost.
    """
    return [sample for sample, _ in batch], [label for _, label in batch]


class MemoryWatch:
    """Samples this process's RSS and its DataLoader workers' USS in a thread.

    DataLoader workers are the children whose command line is this process's (they are
    forked); Ray's processes are children too, but run other programs. USS (memory only that
    process holds) is what copy-on-read growth of a forked worker shows up in.

    Args:
        interval_s: Seconds between samples (USS reads ``/proc/PID/smaps``: not free).
    """

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.me = psutil.Process()
        self.cmdline = self.me.cmdline()
        self.peak_rss = self.me.memory_info().rss
        self.workers: dict[int, list[int]] = {}   # pid -> [first USS, last USS, peak USS]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        self.peak_rss = max(self.peak_rss, self.me.memory_info().rss)
        for child in self.me.children():
            try:
                if child.cmdline() != self.cmdline or child.name() == MANIFEST_HELPER_NAME:
                    continue  # not a DataLoader worker (the forked manifest helper shares the command line)
                uss = child.memory_full_info().uss
            except psutil.Error:
                continue
            seen = self.workers.setdefault(child.pid, [uss, uss, uss])
            seen[1], seen[2] = uss, max(seen[2], uss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def mark(self) -> dict[str, Any]:
        """Peak RSS so far, and every worker seen so far with its USS growth since its first sample
        (persistent workers: growth over all epochs so far)."""
        self._sample()
        workers = [{"pid": pid, "uss_first_mb": v[0] / 1e6, "uss_last_mb": v[1] / 1e6, "uss_peak_mb": v[2] / 1e6,
                    "uss_growth_mb": (v[2] - v[0]) / 1e6} for pid, v in self.workers.items()]
        return {"peak_rss_main_mb": self.peak_rss / 1e6, "workers": workers}

    def __enter__(self) -> "MemoryWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_epochs(epochs: int, loader_for_epoch: Callable[[int], Iterable], watch: MemoryWatch,
               epoch_extra: Callable[[int], dict[str, Any]] | None = None,
               log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Take every batch of ``epochs`` epochs; one row per epoch.

    Returns:
        ``epoch, samples, seconds, samples_per_s, peak_rss_main_mb, workers`` (each worker's USS),
        plus what ``epoch_extra`` adds.
    """
    rows = []
    for epoch in range(epochs):
        started = time.perf_counter()
        samples = 0
        for _, labels in loader_for_epoch(epoch):
            samples += len(labels)
        seconds = time.perf_counter() - started
        row = {"epoch": epoch, "samples": samples, "seconds": seconds,
               "samples_per_s": samples / seconds if seconds else 0.0, **watch.mark()}
        if epoch_extra is not None:
            row.update(epoch_extra(epoch))
        rows.append(row)
        log(f"epoch {epoch + 1}: {samples} samples in {seconds:.1f} s = {row['samples_per_s']:.0f} samples/s "
            f"(pid {os.getpid()})")
    return rows
