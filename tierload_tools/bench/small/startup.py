"""ImageNet-scale start-up, and a DataLoader worker's private memory at millions of keys.

Both run against a synthetic bucket of the emulated S3 (no upload: the emulator makes up the
listing, see :class:`tierload_tools.bench.own_buckets.SyntheticBucket`), each in its own process
so the main process's memory is tierload's alone.

* :func:`startup`: ``TieredDataset(...)`` then its first sample, exactly as a user calls them.
  :class:`StepClock` times the steps inside by wrapping tierload's functions where they are
  looked up (listing, manifest build, manifest save, Ray and node cache, registration, the
  first plan), and records the process's RSS after each. A step whose function was renamed
  is reported as not seen; the totals stay measured.
* :func:`baseline`: a process that imports torch and iterates a plain ``DataLoader``: the
  memory a user pays before tierload (its peak RSS is the floor tierload's is read against).
* :func:`worker_memory`: the same start-up at a larger key count, then a ``DataLoader`` with
  persistent workers walks the manifest for two epochs the way ``TieredDataset`` does per
  sample (this rank's order, the worker's positions, each sample's block and label) without
  reading any bytes, and each worker reports its own USS at the start and after each epoch.
  Reading millions of objects for real would take an hour per epoch on the current design;
  the walk measures the mechanism the issue names (copy-on-read of per-sample Python
  objects in forked workers) at full scale.

``python -m tierload_tools.bench.small.startup startup|worker-memory|baseline SETUP_JSON RESULT_JSON``.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import psutil
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

# (step name, module, attribute path): where tierload looks each step's function up today.
STEPS = (
    ("list", "tierload.stores.cold.source", "ColdSource.list_objects"),
    ("build_manifest (incl. list)", "tierload.data.manifest_build", "build_manifest"),
    ("manifest to_json", "tierload.data.manifest", "Manifest.to_json"),
    ("manifest helper (list, build, save in a child)", "tierload.loader.dataset", "load_manifest_apart"),
    ("ray + node cache", "tierload.deploy.runtime", "node_endpoint"),
    ("registration", "tierload.loader.dataset", "TieredDataset._register"),
    ("first plan", "tierload.loader.dataset", "TieredDataset._plan"),
    ("open stream (incl. plan)", "tierload.loader.dataset", "TieredDataset._open_stream"),
)

# Modules the training process does not load (the manifest build runs in the forked helper):
# importing one to wrap its step would add what tierload never loads (pyarrow, 25 MB) to the RSS
# measured, so their steps are timed only where the process loaded them itself.
LOADED_APART = frozenset({"tierload.data.manifest_build"})


class StepClock:
    """Times calls of named functions (by wrapping them) and the RSS after each call."""

    def __init__(self) -> None:
        self.steps: dict[str, dict[str, float]] = {}
        self.missing: list[str] = []  # steps whose function is not where STEPS says: a stale entry
        self.apart: list[str] = []  # steps of modules this process never loaded (LOADED_APART)
        self.peak_anon_mb: float | None = None  # the largest RssAnon after a step (MB)
        self._undo: list[tuple[Any, str, Any]] = []
        self._process = psutil.Process()

    def wrap(self, name: str, module: str, path: str) -> None:
        if module in LOADED_APART and module not in sys.modules:
            self.apart.append(f"{name} ({module}.{path})")
            return
        owner: Any = importlib.import_module(module)
        *parents, attribute = path.split(".")
        try:
            for part in parents:
                owner = getattr(owner, part)
            original = getattr(owner, attribute)
        except AttributeError:
            self.missing.append(f"{name} ({module}.{path})")
            return
        clock = self

        @functools.wraps(original)
        def timed(*args, **kwargs):
            started, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                clock.record(name, time.perf_counter() - started, time.process_time() - cpu)

        setattr(owner, attribute, timed)
        self._undo.append((owner, attribute, original))

    def record(self, name: str, seconds: float, cpu_s: float = 0.0) -> None:
        # cpu_s: this process's CPU seconds (all its threads) in the step; on a loaded machine
        # wall seconds measure the machine, CPU seconds the step
        step = self.steps.setdefault(name, {"calls": 0, "seconds": 0.0, "cpu_s": 0.0})
        step["calls"] += 1
        step["seconds"] += seconds
        step["cpu_s"] += cpu_s
        step["rss_after_mb"] = self._process.memory_info().rss / 1e6
        anon = _status_mb("RssAnon")
        if anon is not None:
            step["anon_after_mb"] = anon
            self.peak_anon_mb = max(self.peak_anon_mb or 0.0, anon)

    def __enter__(self) -> "StepClock":
        for step in STEPS:
            self.wrap(*step)
        return self

    def __exit__(self, *exc) -> None:
        for owner, attribute, original in reversed(self._undo):
            setattr(owner, attribute, original)


def _config(setup: dict[str, Any]):
    from tierload.config.loading import load_config

    work = setup["workdir"]
    return load_config({"hot": {"dir": os.path.join(work, "hot")}, "warm": {"url": None},
                        "manifest": {"cache_dir": os.path.join(work, "manifests")},
                        "ray": {"num_cpus": os.cpu_count() or 1}})


def _start(setup: dict[str, Any], config, first_sample: bool) -> tuple[Any, dict[str, Any]]:
    """Construct the dataset (and take its first sample); the steps, totals and RSS."""
    from tierload.loader.dataset import TieredDataset
    from tierload_tools.bench.small.measure import MemoryWatch

    with MemoryWatch(interval_s=0.1) as watch, StepClock() as clock:
        rss_before = watch.me.memory_info().rss / 1e6
        started = time.perf_counter()
        dataset = TieredDataset(setup["url"], config=config, layout="files", storage_options=setup["storage_options"])
        constructed = time.perf_counter() - started
        first = None
        if first_sample:
            started_first = time.perf_counter()
            iterator = iter(dataset)
            next(iterator)
            first = time.perf_counter() - started_first
            getattr(iterator, "close", lambda: None)()  # a generator: closing it closes its stream
        sampled = watch.mark()["peak_rss_main_mb"]
    high_water = _status_mb("VmHWM")
    return dataset, {"keys": dataset.manifest.num_samples, "construct_s": constructed, "first_sample_s": first,
                     "steps": clock.steps, "steps_not_seen": clock.missing,
                     "steps_in_other_processes": clock.apart, "rss_before_mb": rss_before,
                     "peak_rss_main_mb": max(sampled, high_water or 0.0), "peak_rss_sampled_mb": sampled,
                     "peak_rss_anon_mb": clock.peak_anon_mb,
                     "rss_end_mb": psutil.Process().memory_info().rss / 1e6}


def _status_mb(field: str) -> float | None:
    """A ``kB`` field of ``/proc/self/status`` in MB (None where there is none): ``VmHWM`` is the
    kernel's own peak RSS of the process (no sample can miss it), ``RssAnon`` the part of the RSS
    that is not file pages (a mapped file's pages count in RSS once read, and the kernel can
    drop them at any time)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None


def _shutdown(config) -> None:
    import ray

    from tierload.deploy.runtime import stop_actors

    if ray.is_initialized():
        stop_actors(config)
        ray.shutdown()


def startup(setup: dict[str, Any]) -> dict[str, Any]:
    """``TieredDataset`` construction and first sample on the synthetic bucket (see the module doc)."""
    config = _config(setup)
    try:
        return _start(setup, config, first_sample=True)[1]
    finally:
        _shutdown(config)


class ManifestWalk(IterableDataset):
    """Walks a started ``TieredDataset``'s per-sample lookups for ``epochs`` epochs, reading nothing.

    Yields one dict per worker and epoch: ``worker, epoch, samples, uss_start_mb, uss_mb``
    (the worker's USS before its first epoch and after this one).
    """

    def __init__(self, dataset, epochs: int) -> None:
        self.dataset, self.epochs = dataset, epochs
        self._uss_start: float | None = None

    def __iter__(self):
        from tierload.process_memory import map_large_allocations

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None:
            map_large_allocations()  # as an EpochReader in a worker does
        process = psutil.Process()
        if self._uss_start is None:
            self._uss_start = process.memory_full_info().uss / 1e6
        for epoch in range(self.epochs):
            touched, uss_in_epoch = self._walk_epoch(epoch, worker, workers, process)
            yield {"worker": worker, "epoch": epoch, "samples": touched, "uss_start_mb": self._uss_start,
                   "uss_in_epoch_mb": uss_in_epoch, "uss_mb": process.memory_full_info().uss / 1e6}

    def _walk_epoch(self, epoch: int, worker: int, workers: int, process: psutil.Process) -> tuple[int, float]:
        """One epoch's lookups: samples touched, and the USS (MB) at its end with its arrays still held.

        The arrays are freed on return, as an ``EpochReader``'s are when its epoch ends.
        """
        from tierload.data.block_columns import block_key_at
        from tierload.data.order import worker_positions

        manifest = self.dataset.manifest
        blocks, sample_block, sample_index, labels = (manifest.blocks, manifest.sample_block, manifest.sample_index,
                                                      manifest.labels)
        order = self.dataset.rank_order(epoch)
        positions = worker_positions(len(order), worker_id=worker, num_workers=workers,
                                     chunk=self.dataset.batch_size or 1)
        touched = 0
        for position in positions:
            sample = int(order[int(position)])
            key = block_key_at(blocks, int(sample_block[sample]))
            touched += len(key) > 0 and int(sample_index[sample]) >= 0 and int(labels[sample]) >= -1
        return int(touched), process.memory_full_info().uss / 1e6


def worker_memory(setup: dict[str, Any]) -> dict[str, Any]:
    """Start-up at ``setup["url"]``'s key count, then the two-epoch walk (see the module doc)."""
    config = _config(setup)
    try:
        dataset, started = _start(setup, config, first_sample=False)
        dataset.batch_size = setup["batch_size"]
        walk = ManifestWalk(dataset, setup["epochs"])
        loader = DataLoader(walk, batch_size=None, num_workers=setup["num_workers"])
        began = time.perf_counter()
        reports = list(loader)
        walk_s = time.perf_counter() - began
        growth = max((r["uss_mb"] - r["uss_start_mb"] for r in reports), default=0.0)
        in_epoch = max((r["uss_in_epoch_mb"] - r["uss_start_mb"] for r in reports), default=0.0)
        return {"startup": started, "walk_s": walk_s, "reports": reports, "max_uss_growth_mb": growth,
                "max_uss_growth_in_epoch_mb": in_epoch}
    finally:
        _shutdown(config)


def baseline(setup: dict[str, Any]) -> dict[str, Any]:
    """What a user pays without tierload: torch imported and a plain ``DataLoader`` iterated once
    (in-memory tensors, no workers); this process's peak RSS."""
    from torch import arange
    from torch.utils.data import TensorDataset

    from tierload_tools.bench.small.measure import MemoryWatch

    with MemoryWatch(interval_s=0.05) as watch:
        loader = DataLoader(TensorDataset(arange(100_000)), batch_size=256, shuffle=True)
        batches = sum(1 for _ in loader)
        peak = watch.mark()["peak_rss_main_mb"]
    return {"batches": batches, "peak_rss_main_mb": peak}


PHASES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"startup": startup, "worker-memory": worker_memory,
                                                                  "baseline": baseline}


def main(argv: list[str]) -> int:
    phase, setup_path, result_path = argv
    setup = json.loads(Path(setup_path).read_text(encoding="utf-8"))
    try:
        result = {**PHASES[phase](setup), "ok": True}
    except BaseException as exc:  # noqa: BLE001 - reported in the result, with its traceback
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
