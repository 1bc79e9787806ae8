"""Run the mixture workload (issue 22, item 6) and report it.

Two sources of raw files in one stored bucket on the emulated S3 (latency and bandwidth caps as
the default workload's): ``web`` and ``code``, of equal size by default, mixed ``weights`` (70/30),
so ``web`` wraps into its next pass within an epoch and ``code`` finishes its pass over epochs; read by
``TieredDataset([Source(web, 0.7), Source(code, 0.3)])`` with a hot tier of ``hot_fraction`` of
both sources' bytes and no warm tier, for ``epochs`` epochs (see
:mod:`tierload_tools.bench.mixture.contender` for what each epoch measures).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tierload_tools.bench.run import machine_info
from tierload_tools.bench.small.run import _Runner

BUCKET = "mixture-bench"
MODULE = "tierload_tools.bench.mixture.contender"
KIB = 1024


@dataclass(frozen=True)
class MixtureOptions:
    """One run of the mixture workload.

    Attributes:
        web_files, code_files: Objects of each source.
        object_kib: KiB per object.
        weights: The sources' weights (web, code).
        epochs, batch_size, num_workers: The loop.
        hot_fraction: The hot tier, as a fraction of both sources' bytes.
        latency_ms, connection_mb_s, total_mb_s: The emulated link.
        cache_dir: Where the bucket is kept (None: ``~/.cache/tierload/bench``).
        seed: Bodies' and shuffle seed.
    """

    web_files: int = 1000
    code_files: int = 1000
    object_kib: int = 64
    weights: tuple[float, float] = (0.7, 0.3)
    epochs: int = 3
    batch_size: int = 32
    num_workers: int = 2
    hot_fraction: float = 0.25
    latency_ms: float = 20.0
    connection_mb_s: float = 4.0
    total_mb_s: float = 16.0
    cache_dir: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.web_files, self.code_files, self.object_kib, self.epochs, self.batch_size) < 1:
            raise ValueError(f"files, object_kib, epochs and batch_size must be >= 1: {self}")
        if self.num_workers < 0 or not 0 < self.hot_fraction <= 1:
            raise ValueError(f"need num_workers >= 0 and 0 < hot_fraction <= 1: {self}")

    @property
    def total_bytes(self) -> int:
        return (self.web_files + self.code_files) * self.object_kib * KIB

    @classmethod
    def quick(cls) -> "MixtureOptions":
        """The CI smoke size: 200 + 200 objects of 16 KiB, 2 epochs."""
        return cls(web_files=200, code_files=200, object_kib=16, epochs=2)


def _bucket(options: MixtureOptions, root: Path) -> Path:
    from tierload_tools.bench.own_buckets import is_stored_bucket, write_stored_bucket

    size = options.object_kib * KIB
    directory = root / f"mixture-{options.web_files}-{options.code_files}-{size}-{options.seed}"
    if not is_stored_bucket(directory):
        rng = np.random.default_rng([options.seed, 0x313C])

        def objects():
            for prefix, count in (("web", options.web_files), ("code", options.code_files)):
                for index in range(count):
                    yield f"{prefix}/{index:06d}.bin", rng.integers(0, 256, size, dtype=np.uint8).tobytes()

        write_stored_bucket(directory, objects())
    return directory


def run_mixture(options: MixtureOptions, out_dir: Path, echo: Callable[[str], None] = print,
                timeout_s: float = 3600.0) -> dict[str, Any]:
    """Run the mixture workload; returns its report (:func:`table` renders it).

    Raises:
        ServiceError: moto's server could not be started.
        RuntimeError: The emulated S3 could not be started.
    """
    from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
    from tierload_tools.bench.small.data import cache_root
    from tierload_tools.s3local import CREDENTIALS, LocalS3

    started = time.perf_counter()
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    runner = _Runner(out_dir, echo, timeout_s)
    bucket_dir = _bucket(options, cache_root(options.cache_dir))
    link = LinkSettings(options.latency_ms, options.connection_mb_s, options.total_mb_s)
    report: dict[str, Any] = {"workload": "mixture", "options": asdict(options), "machine": machine_info(),
                              "link": {**asdict(link), "description": link.describe()}, "contenders": {}}
    sources = [{"url": f"s3://{BUCKET}/web", "weight": options.weights[0]},
               {"url": f"s3://{BUCKET}/code", "weight": options.weights[1]}]
    report["dataset"] = {"sources": sources, "objects": [options.web_files, options.code_files],
                         "object_bytes": options.object_kib * KIB, "bytes": options.total_bytes}
    with LocalS3() as s3, EmulatedS3(s3.endpoint_url, link, {BUCKET: f"stored:{bucket_dir}"}) as emulated:
        storage = {**CREDENTIALS, "client_kwargs": {"endpoint_url": emulated.endpoint_url, "region_name": "us-east-1"}}
        setup = {"sources": sources, "storage_options": storage, "endpoint_url": emulated.endpoint_url,
                 "epochs": options.epochs, "batch_size": options.batch_size, "num_workers": options.num_workers,
                 "hot_bytes": int(options.total_bytes * options.hot_fraction), "seed": options.seed}
        report["contenders"]["tierload-mixture"] = runner.contender("tierload-mixture", setup, module=MODULE)
    shutil.rmtree(out_dir / "work", ignore_errors=True)
    report["wall_s"] = time.perf_counter() - started
    return report


def _min_cell(row: dict[str, Any]) -> str:
    """MIN's ratio, ``*`` after it when blocks of different sizes make it a reference, not the optimum."""
    return f"{row['min_hit_ratio']:.3f}" + ("" if row.get("min_exact", True) else "*")


def table(report: dict[str, Any]) -> str:
    """The report as text: the setup, then one line per epoch."""
    options = report["options"]
    lines = [f"mixture: web {options['web_files']} + code {options['code_files']} objects of "
             f"{options['object_kib']} KiB, weights {options['weights'][0]:g}/{options['weights'][1]:g}, "
             f"hot tier {options['hot_fraction']:.0%} of {report['dataset']['bytes'] / 2**20:.1f} MiB, no warm tier, "
             f"{options['num_workers']} workers, batch {options['batch_size']}; link: {report['link']['description']}",
             f"{'epoch':>5} {'samples':>8} {'per source':>14} {'samples/s':>10} {'hot hit':>8} {'MIN':>6} "
             f"{'S3 GETs':>8} {'S3 MB':>8}"]
    run = report["contenders"]["tierload-mixture"]
    if not run.get("ok"):
        return "\n".join([*lines, f"tierload-mixture failed: {run.get('error')}"])
    for row in run["epochs"]:
        per_source = "/".join(str(count) for count in row["per_source"].values())
        lines.append(f"{row['epoch'] + 1:>5} {row['samples']:>8} {per_source:>14} {row['samples_per_s']:>10.0f} "
                     f"{row['hot_hit_ratio']:>8.3f} {_min_cell(row):>6} {row['s3_gets']:>8} "
                     f"{row['s3_bytes'] / 1e6:>8.1f}")
    return "\n".join(lines)


def write(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """``mixture.json`` and ``mixture.txt`` in ``out_dir``."""
    paths = {"json": Path(out_dir) / "mixture.json", "txt": Path(out_dir) / "mixture.txt"}
    paths["json"].write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    paths["txt"].write_text(table(report) + "\n", encoding="utf-8")
    return paths
