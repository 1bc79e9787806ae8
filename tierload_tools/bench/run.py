"""Run a benchmark: the emulated S3, the data, every contender in its own process, the report.

Order of work: generate (or reuse) the images; start moto's S3 server and upload them
straight to it; start the emulated link in front of it; measure the server's raw GET
throughput and the emulated link's (both with 16 GETs in flight); convert the data for the
peers that need it (once); then run every contender ``repeats`` times, interleaved
(contender A, B, ... then again), each in a fresh subprocess with fresh caches, while a
thread samples the RSS of its whole process tree.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import tierload
from tierload_tools.bench.contenders import CONTENDERS, ContenderInfo, Context
from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings, read_counters
from tierload_tools.bench.loop import s3_delta
from tierload_tools.bench.workload import BUCKET, Workload, generate, upload

log = logging.getLogger(__name__)

# With s3torch and raydata the quick run took 154 s on the 2-core VM at load average 2.5-10
# (Ray Data 48 s, s3torch 15 s of it): under the 3 minutes CI allows, not by much.
QUICK_CONTENDERS = ("s3fs", "simplecache", "s3torch", "raydata", "tierload", "ram")
PEERS_ENV_HINT = "bash benchmarks/setup_peers.sh"
_PEER_IMPORTS = {"streaming": "streaming", "litdata": "litdata"}


@dataclass
class BenchOptions:
    """One ``tierload bench`` invocation.

    Attributes:
        workload: What every contender reads.
        link: The emulated link.
        contenders: Names from :data:`tierload_tools.bench.contenders.CONTENDERS`, in run order.
        repeats: Runs of each contender; reported figures are medians.
        out_dir: Where the JSON, PNG and logs go.
        peers_python: Interpreter of the peers' environment (None: look for benchmarks/.venv-peers).
        data_cache_dir: Where generated images are kept between invocations (None: default).
        probe_seconds: Length of each throughput probe.
    """

    workload: Workload = field(default_factory=Workload)
    link: LinkSettings = field(default_factory=LinkSettings)
    contenders: tuple[str, ...] = tuple(CONTENDERS)
    repeats: int = 3
    out_dir: Path = Path("bench-results")
    peers_python: str | None = None
    data_cache_dir: str | None = None
    probe_seconds: float = 5.0

    def __post_init__(self) -> None:
        unknown = [name for name in self.contenders if name not in CONTENDERS]
        if unknown:
            raise ValueError(f"unknown contenders {unknown}; choose from {', '.join(CONTENDERS)}")
        if self.repeats < 1:
            raise ValueError(f"repeats={self.repeats}; need >= 1")


def repo_root() -> Path:
    """The directory that holds the ``tierload`` package (put on the peers' PYTHONPATH)."""
    return Path(tierload.__file__).resolve().parent.parent


def find_peers_python(explicit: str | None) -> str | None:
    """The peers' interpreter: ``explicit``, ``TIERLOAD_BENCH_PEERS_PYTHON``, or benchmarks/.venv-peers."""
    for candidate in (explicit, os.environ.get("TIERLOAD_BENCH_PEERS_PYTHON"),
                      str(Path.cwd() / "benchmarks" / ".venv-peers" / "bin" / "python"),
                      str(repo_root() / "benchmarks" / ".venv-peers" / "bin" / "python")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def machine_info() -> dict[str, Any]:
    import psutil
    import torch

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "os": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "gpu": "none"}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo_root()), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")   # decoding runs in DataLoader workers; no thread oversubscription
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


class TreeMemory:
    """Samples the summed RSS of a process and all its descendants (every 0.2 s) in a thread."""

    def __init__(self, pid: int, interval_s: float = 0.2) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.peak_root_bytes = 0
        self.peak_parts: dict[str, int] = {}  # what each kind of process held at the tree's peak (bytes)
        self.seen: dict[int, float] = {}  # pid -> create time of every descendant seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return
        total = 0
        parts: dict[str, int] = {}
        for proc in procs:
            try:
                rss = proc.memory_info().rss
                self.seen.setdefault(proc.pid, proc.create_time())
                label = "contender" if proc.pid == self.pid else _process_label(proc)
            except psutil.Error:
                continue
            total += rss
            parts[label] = parts.get(label, 0) + rss
            if proc.pid == self.pid:
                self.peak_root_bytes = max(self.peak_root_bytes, rss)
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_parts = total, parts

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "TreeMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _process_label(proc: Any) -> str:
    """What a process of a contender's tree is, for the peak's breakdown: its name, or for a Python
    process the script or module it runs (Ray's agents and monitors, a DataLoader worker's parent
    command), so the same kind of process sums under one label.

    Raises:
        psutil.Error: The process is gone or cannot be read.
    """
    name = proc.name()
    if not name.startswith("python"):
        return name  # raylet, gcs_server, ray::<actor>, node (the emulated S3's peers)
    command = proc.cmdline()
    for at, part in enumerate(command[1:], 1):
        if part == "-m" and at + 1 < len(command):
            return command[at + 1]
        if part.endswith(".py"):
            return os.path.basename(part)
    return name


def _kill_tree(pid: int, seen: dict[int, float]) -> None:
    """Kill a contender process and every descendant it left, children first.

    Descendants are the live children of ``pid`` plus every process the memory sampler saw in
    its tree (``seen``: pid -> create time, so a reused pid is never hit), which also finds the
    orphans of a root that has already exited.
    """
    import psutil

    procs: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
        procs.update({p.pid: p for p in root.children(recursive=True)})
        procs[pid] = root
    except psutil.Error:
        pass
    for other, created in seen.items():
        if other in procs:
            continue
        try:
            proc = psutil.Process(other)
            if proc.create_time() == created:
                procs[other] = proc
        except psutil.Error:
            continue
    procs = dict(sorted(procs.items(), key=lambda item: item[0] == pid))
    for proc in procs.values():
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(procs.values()), timeout=10)


def run_phase(python: str, info: ContenderInfo, phase: str, ctx: Context, log_dir: Path,
              timeout_s: float) -> dict[str, Any]:
    """Run one phase of a contender in a subprocess; returns its result plus memory and wall time."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{info.name}-{phase}-r{ctx.repeat}"
    context_path, result_path = log_dir / f"{stem}.context.json", log_dir / f"{stem}.result.json"
    context_path.write_text(ctx.to_json(), encoding="utf-8")
    result_path.unlink(missing_ok=True)
    started = time.perf_counter()
    with open(log_dir / f"{stem}.log", "w", encoding="utf-8") as output:
        entry = ([python, str(Path(__file__).with_name("peer_entry.py"))] if info.environment == "peers"
                 else [python, "-m", "tierload_tools.bench.contenders"])
        proc = subprocess.Popen([*entry, info.name, phase, str(context_path), str(result_path)], stdout=output,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_child_env(), cwd=str(log_dir))
        with TreeMemory(proc.pid) as memory:
            try:
                proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            # whatever the contender left running (Ray, loader workers) goes with it
            _kill_tree(proc.pid, dict(memory.seen))
    wall_s = time.perf_counter() - started
    if timed_out:
        result = {"ok": False, "error": f"timed out after {timeout_s:.0f}s"}
    elif result_path.exists():
        result = json.loads(result_path.read_text(encoding="utf-8"))
    else:
        result = {"ok": False, "error": f"exited with code {proc.returncode} and no result (see {stem}.log)"}
    result.update(wall_s=wall_s, peak_rss_bytes=memory.peak_bytes, peak_rss_main_bytes=memory.peak_root_bytes,
                  peak_rss_parts_bytes=dict(sorted(memory.peak_parts.items(), key=lambda part: -part[1])),
                  log=str(log_dir / f"{stem}.log"))
    return result


def check_importable(python: str, module: str) -> str | None:
    """None if ``module`` imports under ``python``, else the reason (last line of the error)."""
    try:
        done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300,
                              env=_child_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def peer_versions(python: str) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in "
            "('torch', 'torchvision', 'mosaicml-streaming', 'litdata') if __import__('importlib.util').util."
            "find_spec(n.replace('mosaicml-', '')) or n == 'torch'}))")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
        return json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}


def _python_for(info: ContenderInfo, peers_python: str | None) -> tuple[str | None, str | None]:
    """(interpreter, reason it cannot run)."""
    if info.environment == "main":
        if info.requires is None:
            return sys.executable, None
        reason = check_importable(sys.executable, info.requires)
        if reason is None:
            return sys.executable, None
        return None, f"{info.requires} does not import ({reason}); install it with `pip install -e '.[bench]'`"
    module = _PEER_IMPORTS[info.name]
    if peers_python is not None:
        reason = check_importable(peers_python, module)
        if reason is None:
            return peers_python, None
        return None, f"{module} does not import in the peers' environment {peers_python}: {reason}"
    reason = check_importable(sys.executable, module)
    if reason is None:
        return sys.executable, None
    return None, (f"{module} does not import beside tierload's torch ({reason}) and there is no peers' "
                  f"environment (create it with `{PEERS_ENV_HINT}`)")


def _median_epochs(runs: list[dict]) -> list[dict[str, Any]]:
    epochs = min(len(run["epochs"]) for run in runs)
    rows = []
    for index in range(epochs):
        values = [run["epochs"][index] for run in runs]
        row: dict[str, Any] = {"epoch": index}
        for name in values[0]:
            numbers = [v[name] for v in values
                       if isinstance(v.get(name), (int, float)) and not isinstance(v[name], bool)]
            if name != "epoch" and len(numbers) == len(values):
                row[name] = statistics.median(numbers)
            elif all(isinstance(v.get(name), bool) for v in values):  # a flag such as min_exact: in every run
                row[name] = all(v[name] for v in values)
        if "samples_per_s" in row and all(v.get("link") for v in values):
            # a timeline has no median: the run whose samples/s is nearest the median's
            row["link"] = min(values, key=lambda v: abs(v["samples_per_s"] - row["samples_per_s"]))["link"]
        rows.append(row)
    return rows


def _summarise(info: ContenderInfo, runs: list[dict], conversion: dict | None) -> dict[str, Any]:
    ok = [run for run in runs if run.get("ok")]
    entry: dict[str, Any] = {"label": info.label, "environment": info.environment, "runs": runs,
                             "conversion": conversion, "successful_runs": len(ok)}
    if not ok:
        entry["status"] = "failed"
        entry["reason"] = runs[0].get("error", "no run") if runs else "no run"
        partial: list[list] = [run["finished_epochs"] for run in runs if run.get("finished_epochs")]
        if partial:
            entry["partial_epochs"] = partial[0]
            entry["reason"] = f"after {len(partial[0])} epoch(s): {entry['reason']}"
        return entry
    entry["status"] = "ok"
    entry["epochs"] = _median_epochs(ok)
    for name in ("setup_s", "peak_rss_bytes", "peak_rss_main_bytes", "wall_s"):
        entry[name] = statistics.median(run[name] for run in ok)
    entry["notes"] = ok[0].get("notes", "")
    if len(ok) < len(runs):
        entry["notes"] = (entry["notes"] + f"; {len(runs) - len(ok)} of {len(runs)} runs failed: "
                          f"{next(r['error'] for r in runs if not r.get('ok'))}").lstrip("; ")
    return entry


def run_bench(options: BenchOptions, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole benchmark and return the report (see :mod:`tierload_tools.bench.report`).

    Args:
        options: The invocation.
        echo: Receives one progress line at a time.

    Raises:
        ServiceError: moto's server could not be started.
        RuntimeError: The emulated S3 could not be started.
    """
    from tierload_tools.bench import probe
    from tierload_tools.s3local import CREDENTIALS, LocalS3

    started = time.perf_counter()
    workload = options.workload
    out_dir = Path(options.out_dir).resolve()
    work_root, log_dir = out_dir / "work", out_dir / "logs"
    shutil.rmtree(work_root, ignore_errors=True)
    work_root.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine_info(), "workload": workload.to_dict(),
                              "link": {**options.link.__dict__, "description": options.link.describe()},
                              "repeats": options.repeats, "contenders": {}}
    echo(f"generating {workload.samples} JPEGs of ~{workload.sample_kib} KiB (cached after the first time)")
    jpegs, labels = generate(workload, options.data_cache_dir)
    peers_python = find_peers_python(options.peers_python)
    report["peers_python"] = peers_python
    report["peer_versions"] = peer_versions(peers_python) if peers_python else {}
    with LocalS3() as s3:
        fs = s3.create_bucket(BUCKET)
        dataset = upload(fs, jpegs, labels)
        del jpegs
        report["dataset"] = {"url": dataset.url, "samples": len(dataset.keys), "bytes": dataset.total_bytes,
                             "mean_sample_bytes": dataset.mean_sample_bytes,
                             "hot_capacity_bytes": int(dataset.total_bytes * workload.hot_fraction)}
        with EmulatedS3(s3.endpoint_url, options.link) as emulated:
            echo(f"moto S3 at {s3.endpoint_url}; emulated link at {emulated.endpoint_url}: {options.link.describe()}")
            probe_keys = dataset.keys[: max(64, min(len(dataset.keys), 400))]
            raw = probe.measure(s3.endpoint_url, dataset.bucket, probe_keys, CREDENTIALS, 16, options.probe_seconds)
            shaped = probe.measure(emulated.endpoint_url, dataset.bucket, probe_keys, CREDENTIALS, 16,
                                   options.probe_seconds)
            link_bytes_s = min(options.link.cap_bytes_s, raw.mb_s * 1e6)
            report["probe"] = {"server_raw_mb_s": raw.mb_s, "emulated_link_mb_s": shaped.mb_s,
                               "cap_mb_s": options.link.total_mb_s or None, "link_bound_mb_s": link_bytes_s / 1e6,
                               "link_bound_samples_s": link_bytes_s / dataset.mean_sample_bytes}
            echo(f"server raw GET throughput {raw.mb_s:.1f} MB/s, emulated link {shaped.mb_s:.1f} MB/s "
                 f"(16 in flight); link bound {link_bytes_s / 1e6:.1f} MB/s = "
                 f"{link_bytes_s / dataset.mean_sample_bytes:.0f} samples/s")
            cold_epoch_s = dataset.total_bytes / link_bytes_s
            timeout_s = 300 + 8 * workload.epochs * cold_epoch_s  # 8x a link-bound epoch; then it has hung

            def context(name: str, repeat: int) -> Context:
                workdir = work_root / f"{name}-r{repeat}"
                workdir.mkdir(parents=True, exist_ok=True)
                (work_root / "convert").mkdir(exist_ok=True)
                return Context(name, workload, dataset, emulated.endpoint_url, dict(CREDENTIALS), str(workdir),
                               str(work_root / "convert"), repeat)

            runnable: dict[str, str] = {}
            conversions: dict[str, dict] = {}
            for name in options.contenders:
                info = CONTENDERS[name]
                python, reason = _python_for(info, peers_python)
                if python is None:
                    report["contenders"][name] = {"label": info.label, "status": "not run", "reason": reason,
                                                  "environment": info.environment}
                    echo(f"{name}: not run: {reason}")
                    continue
                if info.converts:
                    echo(f"{name}: converting the dataset")
                    before = read_counters(emulated.endpoint_url)
                    result = run_phase(python, info, "convert", context(name, 0), log_dir, timeout_s)
                    result["s3"] = s3_delta(before, read_counters(emulated.endpoint_url))
                    conversions[name] = result
                    if not result.get("ok"):
                        report["contenders"][name] = {"label": info.label, "status": "failed",
                                                      "reason": f"conversion failed: {result['error']}",
                                                      "conversion": result, "environment": info.environment}
                        echo(f"{name}: conversion failed: {result['error']} (log: {result['log']})")
                        continue
                    echo(f"{name}: converted in {result['seconds']:.1f} s")
                runnable[name] = python
            runs: dict[str, list[dict]] = {name: [] for name in runnable}
            for repeat in range(options.repeats):
                for name, python in runnable.items():
                    echo(f"{name}: run {repeat + 1} of {options.repeats}")
                    ctx = context(name, repeat)
                    result = run_phase(python, CONTENDERS[name], "run", ctx, log_dir, timeout_s)
                    shutil.rmtree(ctx.workdir, ignore_errors=True)
                    runs[name].append(result)
                    if result.get("ok"):
                        echo(f"{name}: " + ", ".join(f"epoch {row['epoch'] + 1} {row['samples_per_s']:.0f} samples/s"
                                                     for row in result["epochs"]))
                    else:
                        echo(f"{name}: failed: {result['error']} (log: {result['log']})")
            for name in runnable:
                report["contenders"][name] = _summarise(CONTENDERS[name], runs[name], conversions.get(name))
    report["contenders"] = {name: report["contenders"][name] for name in options.contenders
                            if name in report["contenders"]}
    shutil.rmtree(work_root, ignore_errors=True)
    report["wall_s"] = time.perf_counter() - started
    return report
