"""Start-up to the first sample: a job that starts the node cache, one that joins it, a plain DataLoader.

50,000 x 1 KiB files in 100 class folders over ``file://``, 2 DataLoader workers (issue 25, item 2).

    python join_startup.py make DIR     # the files, once
    python join_startup.py owner DIR &  # starts Ray and the node cache, lists, first sample, waits for DIR/exit
    python join_startup.py join DIR     # joins the owner's cache (its cached manifest), first sample
    python join_startup.py plain DIR    # a plain DataLoader over the same files, first sample

Each prints one JSON line: seconds from interpreter start to the first sample, the same after
``import torch``, this process's CPU seconds, its peak RSS (``VmHWM``, MB) and the RSS after
``import torch``, and whether ``ray`` was imported.
"""

from __future__ import annotations

import json
import os
import sys
import time

T0 = time.perf_counter()


def _config(root: str) -> dict:
    return {"hot": {"dir": os.path.join(root, "hot"), "capacity_bytes": "256MiB"},
            "warm": {"url": None, "capacity_bytes": 0},
            "manifest": {"cache_dir": os.path.join(root, "manifests")}, "ray": {"num_cpus": 2}}


def _peak_rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _make(data: str) -> None:
    for folder in range(100):
        path = os.path.join(data, f"c{folder:03d}")
        os.makedirs(path, exist_ok=True)
        for index in range(500):
            with open(os.path.join(path, f"{index:05d}.bin"), "wb") as out:
                out.write(os.urandom(1024))


def main(mode: str, root: str) -> None:
    data = os.path.join(root, "data")
    if mode == "make":
        _make(data)
        return
    import torch  # noqa: F401 - the floor every contender pays
    from torch.utils.data import DataLoader, Dataset

    after_torch, rss_torch = time.perf_counter(), _peak_rss_mb()
    if mode == "plain":
        class Files(Dataset):
            def __init__(self) -> None:
                self.paths = [os.path.join(folder, name) for folder, _, names in os.walk(data) for name in names]

            def __len__(self) -> int:
                return len(self.paths)

            def __getitem__(self, index: int) -> bytes:
                with open(self.paths[index], "rb") as handle:
                    return handle.read()

        loader = DataLoader(Files(), batch_size=None, shuffle=True, num_workers=2)
    else:
        from tierload.loader.dataset import TieredDataset

        loader = DataLoader(TieredDataset("file://" + data, _config(root), layout="files", batch_size=1),
                            batch_size=None, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter()
    print(json.dumps({"mode": mode, "first_sample_s": first - T0, "after_torch_s": first - after_torch,
                      "cpu_s": time.process_time(), "peak_rss_mb": _peak_rss_mb(), "rss_torch_mb": rss_torch,
                      "ray_imported": "ray" in sys.modules}), flush=True)
    del iterator
    while mode == "owner" and not os.path.exists(os.path.join(root, "exit")):
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
