"""Run the small-object workloads of issue 11 (item 5) and collect one report per workload.

* ``small-files``: ``count`` x ``size`` files in ``classes`` folders on local disk (``file://``),
  the plain DataLoader against ``TieredDataset``.
* ``small-s3``: the same shape as a bucket the emulated S3 serves itself (latency, no
  bandwidth cap); first the rig's own ceiling (a plain asyncio client, ``ceiling_concurrency``
  GETs in flight, every object once), then ``TieredDataset``.
* ``startup``: a synthetic listing of ``startup_keys`` keys through ``TieredDataset``'s
  start-up and first sample; then the worker-memory walk at ``memory_keys`` keys.

Every contender runs in its own process; the harness samples the RSS of its whole process
tree (:class:`tierload_tools.bench.run.TreeMemory`). With ``profile``, tierload's contender runs
once more for one epoch with py-spy on every Python process of its tree (see
:mod:`tierload_tools.bench.small.profile`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from tierload_tools.bench.run import TreeMemory, _child_env, _kill_tree, machine_info

WORKLOADS = ("small-files", "small-s3", "startup")
S3_BUCKET = "small-bench"
S3_PREFIX = "small"
STARTUP_BUCKET, MEMORY_BUCKET, SYNTHETIC_PREFIX = "imagenet-synthetic", "memory-synthetic", "train"


@dataclass(frozen=True)
class SmallOptions:
    """One run of a small-object workload.

    Attributes:
        workload: One of :data:`WORKLOADS`.
        count: Objects (small-files, small-s3).
        size: Bytes per object.
        classes: Class folders.
        epochs: Epochs per contender (>= 2: epochs 2+ are reported apart).
        batch_size: DataLoader batch size.
        num_workers: DataLoader workers (persistent).
        latency_ms: Emulated first-byte latency (small-s3, startup).
        ceiling_concurrency: GETs in flight of the rig's ceiling probe.
        startup_keys: Keys of the synthetic start-up listing.
        startup_size: Bytes per synthetic object (the mean ImageNet-1k JPEG, ~110 KiB).
        memory_keys: Keys of the worker-memory walk (0: skip it).
        profile: Profile tierload's epoch 1 with py-spy.
        page_cache: small-files: the dataset's files before each contender, ``cold`` (out of the
            page cache) or ``warm`` (all in it).
        peers: Also run the other loaders (issue 16: the S3 Connector for PyTorch, Ray Data) on
            small-files and small-s3.
        peer_loaders: Which of them (``s3torch``, ``raydata``; on small-s3 also ``tierload-aiobotocore``: tierload
            with ``cold.s3_engine: aiobotocore``) run when ``peers`` is set.
        cache_dir: Where generated data is kept (None: ``~/.cache/tierload/bench``).
        seed: Data and shuffle seed.
    """

    workload: str = "small-files"
    count: int = 200_000
    size: int = 1024
    classes: int = 1000
    epochs: int = 3
    batch_size: int = 256
    num_workers: int = 2
    latency_ms: float = 20.0
    ceiling_concurrency: int = 256
    startup_keys: int = 1_281_167
    startup_size: int = 112_640
    memory_keys: int = 2_000_000
    profile: bool = False
    page_cache: str = "cold"
    peers: bool = True
    peer_loaders: tuple[str, ...] = ("s3torch", "raydata")
    cache_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload={self.workload!r}; choose one of {', '.join(WORKLOADS)}")
        if min(self.count, self.classes, self.batch_size, self.startup_keys, self.ceiling_concurrency) < 1:
            raise ValueError(f"count, classes, batch_size, startup_keys, ceiling_concurrency must be >= 1: {self}")
        unknown = set(self.peer_loaders) - {"s3torch", "raydata", "tierload-aiobotocore"}
        if unknown:
            raise ValueError(f"peer_loaders={self.peer_loaders!r}: unknown {sorted(unknown)}; choose s3torch, raydata, "
                             "tierload-aiobotocore")
        if self.page_cache not in ("cold", "warm"):
            raise ValueError(f"page_cache={self.page_cache!r}; choose cold or warm")
        if self.size < 0 or self.num_workers < 0 or self.memory_keys < 0 or self.epochs < 2:
            raise ValueError(f"need size >= 0, num_workers >= 0, memory_keys >= 0, epochs >= 2: {self}")

    @classmethod
    def smoke(cls, workload: str) -> "SmallOptions":
        """A tiny variant (2,000 objects) of ``workload``, for tests."""
        return cls(workload=workload, count=2000, classes=20, epochs=2, startup_keys=5000, memory_keys=5000)


def run_child(command: list[str], log_path: Path, timeout_s: float, profile_to: Path | None = None) -> dict[str, Any]:
    """Run a ``python -m MODULE ... RESULT_JSON`` child (the result path last) and measure its tree
    (and profile it into ``profile_to`` when given, see :class:`tierload_tools.bench.small.profile.TreeProfiler`)."""
    from contextlib import nullcontext

    from tierload_tools.bench.small.profile import TreeProfiler

    result_path = Path(command[-1])
    result_path.unlink(missing_ok=True)
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as output:
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_child_env(), cwd=str(log_path.parent))
        profiler = TreeProfiler(proc.pid, profile_to) if profile_to is not None else nullcontext()
        with profiler, TreeMemory(proc.pid) as memory:
            try:
                proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_tree(proc.pid, dict(memory.seen))
    if timed_out:
        result = {"ok": False, "error": f"timed out after {timeout_s:.0f} s"}
    elif result_path.exists():
        result = json.loads(result_path.read_text(encoding="utf-8"))
    else:
        result = {"ok": False, "error": f"exited with code {proc.returncode} and no result (see {log_path})"}
    result.update(wall_s=time.perf_counter() - started, peak_rss_tree_mb=memory.peak_bytes / 1e6,
                  peak_rss_root_mb=memory.peak_root_bytes / 1e6, log=str(log_path))
    return result


class _Runner:
    """Writes a contender's setup, runs it (optionally under py-spy), returns its result."""

    def __init__(self, out_dir: Path, echo: Callable[[str], None], timeout_s: float) -> None:
        self.out_dir, self.echo, self.timeout_s = out_dir, echo, timeout_s
        (out_dir / "logs").mkdir(parents=True, exist_ok=True)

    def contender(self, name: str, setup: dict[str, Any], module: str = "tierload_tools.bench.small.contenders",
                  profile_to: Path | None = None, python: str = sys.executable) -> dict[str, Any]:
        stem = self.out_dir / "logs" / (name + ("-profile" if profile_to else ""))
        workdir = Path(setup.get("workdir") or self.out_dir / "work" / stem.name)
        shutil.rmtree(workdir, ignore_errors=True)
        setup = {**setup, "workdir": str(workdir)}
        Path(f"{stem}.setup.json").write_text(json.dumps(setup), encoding="utf-8")
        command = [python, "-m", module, name, f"{stem}.setup.json", f"{stem}.result.json"]
        self.echo(f"{name}{' (profiled)' if profile_to else ''}: running (log {stem}.log)")
        result = run_child(command, Path(f"{stem}.log"), self.timeout_s, profile_to)
        shutil.rmtree(workdir, ignore_errors=True)
        if not result.get("ok"):
            self.echo(f"{name}: failed: {result.get('error')}")
        else:
            for row in result.get("epochs", []):
                self.echo(f"{name}: epoch {row['epoch'] + 1} {row['samples_per_s']:.0f} samples/s")
        return result


def _profile(runner: _Runner, name: str, setup: dict[str, Any]) -> dict[str, Any]:
    from tierload_tools.bench.small.profile import summarise

    path = runner.out_dir / f"profile-{name}-epoch1.txt"
    result = runner.contender(name, {**setup, "epochs": 1}, profile_to=path)
    summary = summarise(path) if path.exists() else {"error": "py-spy wrote no profile"}
    return {"run": {k: result.get(k) for k in ("ok", "error", "epochs", "setup_s")}, "raw": str(path), **summary}


def _files(options: SmallOptions, runner: _Runner, report: dict[str, Any]) -> None:
    from tierload_tools.bench.small.data import files_tree, set_page_cache

    started = time.perf_counter()
    root = files_tree(options.count, options.size, options.classes, options.cache_dir, options.seed)
    runner.echo(f"dataset: {options.count} files of {options.size} B in {options.classes} folders at {root} "
                f"(ready in {time.perf_counter() - started:.1f} s)")
    setup = {"root": str(root), "url": f"file://{root}", "epochs": options.epochs, "batch_size": options.batch_size,
             "num_workers": options.num_workers, "total_bytes": options.count * options.size, "seed": options.seed}
    report["dataset"] = {"url": setup["url"], "objects": options.count, "bytes": setup["total_bytes"],
                         "page_cache": f"{options.page_cache} before each contender (cold: the files' pages dropped "
                                       "with posix_fadvise DONTNEED; warm: every file read once)"}
    report["contenders"] = {}
    for name in ("plain-files", "tierload-files"):
        set_page_cache(root, options.page_cache)  # both contenders' epoch 1 starts from the same state
        report["contenders"][name] = runner.contender(name, setup)
    if options.peers:
        from tierload_tools.bench.small.peers import S3_ONLY

        report["not_run"] = {"s3torch-files": S3_ONLY}
        set_page_cache(root, options.page_cache)
        _peers(runner, ("raydata-files",), setup, report, loaders=options.peer_loaders)
    if options.profile:
        set_page_cache(root, options.page_cache)
        report["profile"] = _profile(runner, "tierload-files", setup)


def _peers(runner: _Runner, names: tuple[str, ...], setup: dict[str, Any], report: dict[str, Any],
           counters: Callable[[], dict[str, int]] | None = None, loaders: tuple[str, ...] = ("s3torch", "raydata")
           ) -> None:
    """Run the other loaders (issue 16) of ``loaders`` after tierload; one whose package is missing goes
    to ``report["not_run"]`` with the reason. ``counters``: the emulated S3's, to record each run's traffic."""
    from tierload_tools.bench.small.peers import missing_package

    for name in names:
        if name.partition("-")[0] not in loaders:
            continue
        reason = missing_package(name)
        if reason is not None:
            report.setdefault("not_run", {})[name] = reason
            runner.echo(f"{name}: {reason}")
            continue
        before = counters() if counters else {}
        report["contenders"][name] = runner.contender(name, setup, module="tierload_tools.bench.small.peers")
        if counters:
            after = counters()
            report["contenders"][name]["s3"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}


def _s3(options: SmallOptions, runner: _Runner, report: dict[str, Any]) -> None:
    from tierload_tools.bench import probe
    from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
    from tierload_tools.bench.own_buckets import StoredBucket
    from tierload_tools.bench.small.data import stored_bucket
    from tierload_tools.s3local import CREDENTIALS, LocalS3

    started = time.perf_counter()
    directory = stored_bucket(options.count, options.size, options.classes, S3_PREFIX, options.cache_dir,
                              options.seed)
    keys = StoredBucket(directory).keys
    runner.echo(f"dataset: {len(keys)} objects of {options.size} B as a stored bucket at {directory} "
                f"(ready in {time.perf_counter() - started:.1f} s)")
    link = LinkSettings(options.latency_ms, 0, 0)
    report["link"] = {**asdict(link), "description": link.describe()}
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, link, {S3_BUCKET: f"stored:{directory}"}) as emulated:
        ceiling = probe.measure_unsigned(emulated.endpoint_url, S3_BUCKET, keys, options.ceiling_concurrency,
                                         seconds=600.0)
        report["ceiling"] = {"objects": ceiling.objects, "seconds": ceiling.seconds,
                             "objects_per_s": ceiling.objects / ceiling.seconds,
                             "concurrency": ceiling.concurrency, "mb_s": ceiling.mb_s,
                             "client": "aiohttp, unsigned GETs, one session, every object once"}
        runner.echo(f"rig ceiling: {ceiling.objects / ceiling.seconds:.0f} objects/s "
                    f"({ceiling.concurrency} GETs in flight, plain aiohttp client)")
        options_s3 = {**CREDENTIALS, "client_kwargs": {"endpoint_url": emulated.endpoint_url,
                                                       "region_name": "us-east-1"}}
        setup = {"url": f"s3://{S3_BUCKET}/{S3_PREFIX}", "storage_options": options_s3, "epochs": options.epochs,
                 "batch_size": options.batch_size, "num_workers": options.num_workers,
                 "total_bytes": options.count * options.size, "seed": options.seed}
        report["dataset"] = {"url": setup["url"], "objects": len(keys), "bytes": setup["total_bytes"]}
        before = emulated.counters()
        report["contenders"] = {"tierload-s3": runner.contender("tierload-s3", setup)}
        after = emulated.counters()
        report["contenders"]["tierload-s3"]["s3"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        if options.peers and "tierload-aiobotocore" in options.peer_loaders:
            _aiobotocore_engine(runner, setup, report, emulated.counters)
        if options.peers:
            _peers(runner, ("s3torch-s3", "raydata-s3"), setup, report, emulated.counters, options.peer_loaders)
        if options.profile:
            report["profile"] = _profile(runner, "tierload-s3", setup)


def _aiobotocore_engine(runner: _Runner, setup: dict[str, Any], report: dict[str, Any],
                        counters: Callable[[], dict[str, int]]) -> None:
    """tierload again with ``cold.s3_engine: aiobotocore`` (issue 24: the engine is chosen by this measurement)."""
    name = "tierload-s3-aiobotocore"
    before = counters()
    report["contenders"][name] = runner.contender(name, {**setup, "s3_engine": "aiobotocore"})
    after = counters()
    report["contenders"][name]["s3"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}


def _startup(options: SmallOptions, runner: _Runner, report: dict[str, Any]) -> None:
    from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
    from tierload_tools.s3local import CREDENTIALS, LocalS3

    link = LinkSettings(options.latency_ms, 0, 0)
    report["link"] = {**asdict(link), "description": link.describe()}
    buckets = {STARTUP_BUCKET: f"synthetic:{options.startup_keys}:{options.startup_size}:{options.classes}:"
                               f"{SYNTHETIC_PREFIX}"}
    if options.memory_keys:
        buckets[MEMORY_BUCKET] = f"synthetic:{options.memory_keys}:{options.size}:{options.classes}:{SYNTHETIC_PREFIX}"
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, link, buckets) as emulated:
        storage = {**CREDENTIALS, "client_kwargs": {"endpoint_url": emulated.endpoint_url, "region_name": "us-east-1"}}
        module = "tierload_tools.bench.small.startup"
        report["dataset"] = {"url": f"s3://{STARTUP_BUCKET}/{SYNTHETIC_PREFIX}", "objects": options.startup_keys,
                             "bytes": options.startup_keys * options.startup_size}
        report["baseline"] = runner.contender("baseline", {}, module=module)
        report["startup"] = runner.contender("startup", {"url": report["dataset"]["url"], "storage_options": storage},
                                             module=module)
        if options.memory_keys:
            setup: dict[str, Any] = {"url": f"s3://{MEMORY_BUCKET}/{SYNTHETIC_PREFIX}", "storage_options": storage,
                     "epochs": 2, "batch_size": options.batch_size, "num_workers": options.num_workers}
            report["worker_memory"] = runner.contender("worker-memory", setup, module=module)
        report["emulator_counters"] = emulated.counters()


def run_small(options: SmallOptions, out_dir: Path, echo: Callable[[str], None] = print,
              timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run one small-object workload; returns its report (see :mod:`tierload_tools.bench.small.report`).

    Raises:
        ServiceError: moto's server could not be started.
        RuntimeError: The emulated S3 could not be started.
    """
    started = time.perf_counter()
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    runner = _Runner(out_dir, echo, timeout_s)
    report: dict[str, Any] = {"workload": options.workload, "options": asdict(options), "machine": machine_info()}
    {"small-files": _files, "small-s3": _s3, "startup": _startup}[options.workload](options, runner, report)
    shutil.rmtree(out_dir / "work", ignore_errors=True)
    report["wall_s"] = time.perf_counter() - started
    return report
