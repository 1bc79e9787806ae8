"""tracemalloc over the training process's first sample at 1.28 M keys (the manifest cached, the
node cache started): what the epoch's start allocates (the decoder's pack index, the order, the
worker's positions, the plan) and holds, with the RSS growth beside it.

``python first_epoch_trace.py URL WORKDIR`` (the workdir of a ``file_startup.py`` run: its cached
manifest is mapped, nothing is listed).
"""

from __future__ import annotations

import sys
import tracemalloc


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(url: str, workdir: str) -> None:
    import torch  # noqa: F401 - as a user's process

    from tierload.loader.dataset import TieredDataset
    from tierload_tools.bench.small import startup as bench

    setup = {"url": url, "storage_options": {}, "workdir": workdir}
    config = bench._config(setup)
    try:
        dataset = TieredDataset(url, config=config, layout="files")
        print(f"started: RSS {_rss_mb():.0f} MB, pyarrow.compute loaded: {'pyarrow.compute' in sys.modules}")
        tracemalloc.start(12)
        before, rss_before = tracemalloc.take_snapshot(), _rss_mb()
        iterator = iter(dataset)
        next(iterator)
        current, peak = tracemalloc.get_traced_memory()
        print(f"first sample: RSS +{_rss_mb() - rss_before:.0f} MB; traced held {current / 1e6:.1f} MB, traced peak "
              f"{peak / 1e6:.1f} MB; pyarrow.compute loaded: {'pyarrow.compute' in sys.modules}")
        for stat in tracemalloc.take_snapshot().compare_to(before, "traceback")[:8]:
            frames = [line for line in stat.traceback.format() if line.strip().startswith("File")]
            where = " <- ".join(frame.strip().split("/")[-1] for frame in reversed(frames[-4:]))
            print(f"  {stat.size_diff / 1e6:7.2f} MB held  {where}")
        iterator.close()
    finally:
        bench._shutdown(config)


if __name__ == "__main__":
    main(*sys.argv[1:3])
