"""End to end on a CUDA machine: ``TieredDataset(device="cuda")`` over a local ``file://`` source.

    python benchmarks/gpu_e2e.py [--files N] [--json-out PATH] [--dry-run-on-cpu]

Unlike ``benchmarks/gpu_check.py`` (the block reader alone), this runs the whole dataset: a
local Ray, the node cache actor, the manifest, packs of small objects, the hot tier on local
disk, and the dataset's choice of output path. No S3 endpoint is needed (the cold tier is a
``file://`` directory), so it runs where moto and s3fs are not installed.

What it checks, each as one JSON line (``"ok": true`` or the reason it is not):

1. ``npy`` layout (float32 rows, 8 files x 8 MiB), iterated in the main process with
   ``device="cuda"`` for two epochs: every row lands on the GPU, the multiset of rows equals the
   source's, and epoch 2 (all blocks hot) is served by the direct path (``device_direct_reads``
   counts the blocks kvikio read into device memory) when kvikio is usable.
2. ``files`` layout (20,000 objects of 0-4 KiB in 100 class folders, one of them empty, grouped
   into packs): the same, sample by sample, with the labels.
3. The DataLoader path: 2 workers, ``pin_memory=True`` and :func:`tierload.loader.gpu.to_device` on
   each batch: batches are pinned on the host, then on the GPU, and equal the source.
4. Speed, as a ratio in this run: samples/s of a third (hot) epoch of the ``npy`` dataset with
   ``device="cuda"`` against the same dataset read on the host (``device=None``) with each sample
   sent by ``.cuda(non_blocking=True)``, and by :func:`tierload.loader.gpu.to_device` (pin, then copy,
   sample by sample); no loop checks the samples.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierload import collate  # noqa: E402
from tierload.loader.dataset import TieredDataset  # noqa: E402
from tierload.loader.gpu import choose_path, kvikio_status, to_device  # noqa: E402

ROW = 256  # float32 values per npy row
NPY_FILES, NPY_ROWS = 8, 8 * 2**20 // (ROW * 4)


def emit(out: list[dict], **fields) -> None:
    out.append(fields)
    print(json.dumps(fields), flush=True)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def digest(sample: torch.Tensor | bytes) -> str:
    if isinstance(sample, (bytes, bytearray, memoryview)):
        return xxhash.xxh3_64_hexdigest(bytes(sample))
    return xxhash.xxh3_64_hexdigest(sample.detach().cpu().contiguous().numpy().tobytes())


def make_npy(root: Path) -> Counter:
    rng = np.random.default_rng(0)
    rows_seen: Counter = Counter()
    root.mkdir(parents=True)
    for index in range(NPY_FILES):
        rows = rng.normal(size=(NPY_ROWS, ROW)).astype(np.float32)
        buffer = io.BytesIO()
        np.save(buffer, rows)
        (root / f"part-{index:02d}.npy").write_bytes(buffer.getvalue())
        rows_seen.update(xxhash.xxh3_64_hexdigest(row.tobytes()) for row in rows)
    return rows_seen


def make_files(root: Path, count: int) -> Counter:
    rng = np.random.default_rng(1)
    expected: Counter = Counter()
    classes = sorted(f"class{c:03d}" for c in range(100))
    for name in classes:
        (root / name).mkdir(parents=True)
    for index in range(count):
        label = index % len(classes)
        size = 0 if index == 7 else int(rng.integers(1, 4097))
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        (root / classes[label] / f"{index:07d}.bin").write_bytes(data)
        expected[(xxhash.xxh3_64_hexdigest(data), label)] += 1
    return expected


def config(tmp: Path, name: str) -> dict:
    return {"hot": {"dir": str(tmp / f"hot-{name}"), "capacity_bytes": "4GiB"},
            "warm": {"url": None, "capacity_bytes": 0},
            "manifest": {"cache_dir": str(tmp / f"manifests-{name}")}}


def epoch(dataset: TieredDataset, epoch_no: int, with_labels: bool) -> tuple[Counter, float, bool]:
    dataset.set_epoch(epoch_no)
    seen: Counter = Counter()
    on_device = True
    began = time.perf_counter()
    count = 0
    for sample, label in dataset:
        on_device &= isinstance(sample, torch.Tensor) and sample.is_cuda or not torch.cuda.is_available()
        seen[(digest(sample), int(label)) if with_labels else digest(sample)] += 1
        count += 1
    sync()
    return seen, count / (time.perf_counter() - began), on_device


def check_dataset(out: list[dict], name: str, url: str, cfg: dict, expected: Counter, layout: str,
                  with_labels: bool) -> TieredDataset:
    dataset = TieredDataset(url, cfg, layout=layout, device="cuda", shuffle=True, seed=3)
    for epoch_no in (0, 1):
        before = dataset.consumer_stats["device_direct_reads"]
        seen, rate, on_device = epoch(dataset, epoch_no, with_labels)
        direct = dataset.consumer_stats["device_direct_reads"] - before
        wants_direct = epoch_no == 1 and dataset.device_path.startswith("kvikio")
        ok = seen == expected and on_device and (direct > 0 if wants_direct else True)
        emit(out, check=f"{name}-epoch{epoch_no + 1}", ok=ok, samples=sum(seen.values()),
             expected=sum(expected.values()), exact=seen == expected, all_on_gpu=on_device,
             device_path=dataset.device_path, device_direct_reads=direct, samples_per_s=round(rate, 1))
    return dataset


def check_loader(out: list[dict], url: str, cfg: dict, expected: Counter) -> None:
    dataset = TieredDataset(url, cfg, layout="npy", device=None, shuffle=True, seed=5, batch_size=256)
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=2, collate_fn=collate,
                                         pin_memory=True)
    seen: Counter = Counter()
    pinned = on_device = True
    for batch, _labels in loader:
        pinned &= batch.is_pinned() or not torch.cuda.is_available()
        batch = to_device(batch, "cuda") if torch.cuda.is_available() else batch
        on_device &= batch.is_cuda or not torch.cuda.is_available()
        seen.update(digest(row) for row in batch)
    sync()
    emit(out, check="dataloader-pin-memory", ok=seen == expected and pinned and on_device,
         exact=seen == expected, pinned=pinned, all_on_gpu=on_device, samples=sum(seen.values()))


def timed_hot_epoch(dataset: TieredDataset, epoch_no: int, copy: str | None) -> float:
    """Samples/s of one epoch whose blocks are all hot, with no per-sample check (the loop body of
    a training step that only needs the sample on the GPU). ``copy`` sends each host sample there:
    ``"cuda"`` by ``.cuda(non_blocking=True)`` from pageable memory, ``"pinned"`` by
    :func:`tierload.loader.gpu.to_device` (a pin, then an asynchronous copy: the per-sample way)."""
    dataset.set_epoch(epoch_no)
    sync()
    began = time.perf_counter()
    count = 0
    for sample, _label in dataset:
        if copy == "cuda" and torch.cuda.is_available():
            sample.cuda(non_blocking=True)
        elif copy == "pinned" and torch.cuda.is_available():
            to_device(sample, "cuda")
        count += 1
    sync()
    return count / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--dry-run-on-cpu", action="store_true",
                        help="run the flow without a GPU (samples stay on the host): a check of this script")
    args = parser.parse_args()
    out: list[dict] = []
    usable, gds, reason = kvikio_status()
    emit(out, check="environment", torch=torch.__version__, cuda_available=torch.cuda.is_available(),
         device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
         chosen_path=choose_path("cuda"), kvikio_usable=usable, gds=gds, kvikio_reason=reason)
    if not torch.cuda.is_available() and not args.dry_run_on_cpu:
        emit(out, check="summary", ok=False, why="no CUDA device: nothing to check here")
        return 1
    import ray

    ray.init(address="local", num_cpus=min(8, os.cpu_count() or 1), include_dashboard=False)
    try:
        with tempfile.TemporaryDirectory(dir=os.environ.get("TIERLOAD_GPU_CHECK_DIR")) as name:
            tmp = Path(name)
            rows = make_npy(tmp / "npy")
            files = make_files(tmp / "files", args.files)
            npy = check_dataset(out, "npy", f"file://{tmp / 'npy'}", config(tmp, "npy"), rows, "npy", False)
            check_dataset(out, "files", f"file://{tmp / 'files'}", config(tmp, "files"), files, "files", True)
            check_loader(out, f"file://{tmp / 'npy'}", config(tmp, "npy"), rows)
            device_rate = timed_hot_epoch(npy, 2, copy=None)
            host = TieredDataset(f"file://{tmp / 'npy'}", config(tmp, "npy"), layout="npy", device=None,
                                 shuffle=True, seed=3)
            host_rate = timed_hot_epoch(host, 2, copy="cuda")
            pinned_rate = timed_hot_epoch(host, 3, copy="pinned")
            emit(out, check="npy-hot-epoch-speed", ok=True, device_path=npy.device_path,
                 device_samples_per_s=round(device_rate, 1), host_then_copy_samples_per_s=round(host_rate, 1),
                 host_then_pin_and_copy_samples_per_s=round(pinned_rate, 1),
                 ratio=round(device_rate / host_rate, 2))
    finally:
        ray.shutdown()
    ok = all(r["ok"] for r in out if r["check"] != "environment")
    emit(out, check="summary", ok=ok, failed=[r["check"] for r in out if r.get("ok") is False])
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
