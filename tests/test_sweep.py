"""Capacity planning: the sweep grid, knees and dollars, the CLI's --sweep (table, JSON, chart),
a dataset read from its S3 listing (moto's server), and the fast trace generator."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from helpers import put_indexed_objects

from tierload.cli.main import cli
from tierload.config.loading import load_config
from tierload.config.models import CostConfig
from tierload.errors import ConfigError
from tierload.simulator.dataset_source import dataset_shape
from tierload.simulator.fast.tracegen import fast_job_trace
from tierload.simulator.stack import StackSpec
from tierload.simulator.run import simulate
from tierload.simulator.sweep import parse_sweep, run_sweep, usd_per_run
from tierload.simulator.trace import DatasetShape, JobSpec, job_trace

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

MiB = 2**20


def test_parse_sweep_forms_and_errors():
    assert parse_sweep("hot=5%..100%") == ("hot", pytest.approx(list(np.linspace(0.05, 1.0, 8))))
    assert parse_sweep("warm=10%..30%/3") == ("warm", pytest.approx([0.1, 0.2, 0.3]))
    assert parse_sweep("hot=10%,25%") == ("hot", [0.1, 0.25])
    for bad in ("hot=5..100", "cold=5%..10%", "hot=50%..10%"):
        with pytest.raises(ConfigError, match="--sweep"):
            parse_sweep(bad)


def test_sweep_points_are_the_replays_and_the_knee_is_within_five_percent_of_the_best():
    trace = job_trace(JobSpec(DatasetShape.uniform(400, MiB), epochs=3, world_size=2))
    base = StackSpec("clairvoyant", 0, "lfu", 200 * MiB)
    capacities = [40 * MiB, 120 * MiB, 400 * MiB]
    sweep = run_sweep(trace, base, "hot", capacities, ("clairvoyant", "keep"), epochs=3, cost=CostConfig(),
                      workers=1)
    assert len(sweep.points) == 6 and len(sweep.min_hits) == 3
    for point in sweep.points:
        alone = simulate(trace, StackSpec(point.policy, point.capacity_bytes, "lfu", 200 * MiB))
        assert point.result.cold_bytes == alone.cold_bytes and point.result.hot_hits == alone.hot_hits
    # clairvoyant reaches MIN at every capacity (equal blocks), and MIN only grows with capacity
    assert [p.result.hot_hits for p in sweep.line("clairvoyant")] == sweep.min_hits
    assert sweep.min_hits == sorted(sweep.min_hits)
    for policy in ("clairvoyant", "keep"):
        best = min(p.result.cold_bytes for p in sweep.line(policy))
        knee = sweep.knee(policy)
        assert knee.result.cold_bytes <= 1.05 * best
        smaller = [p for p in sweep.line(policy) if p.capacity_bytes < knee.capacity_bytes]
        assert all(p.result.cold_bytes > 1.05 * best for p in smaller)


def test_dollars_per_run_add_requests_egress_and_storage():
    trace = job_trace(JobSpec(DatasetShape.uniform(10, 2**30), epochs=1))
    result = simulate(trace, StackSpec("keep", 0))
    assert result.cold_gets == 10 * 16 and result.cold_bytes == 10 * 2**30  # GETs of at most 64 MiB
    cost = CostConfig(s3_get_usd_per_1000=1.0, s3_egress_usd_per_gb=0.5, hot_usd_per_gb_month=73.0,
                      warm_usd_per_gb_month=0.0, run_hours=10.0)
    spec = StackSpec("keep", 2**30)
    # 160 GETs = $0.16; 10 GiB out = $5; 1 GiB on each of 2 nodes for 10 h of a 730 h month at $73 = $2
    assert usd_per_run(result, spec, 2, cost) == pytest.approx(0.16 + 5 + 2)


def test_parallel_sweep_equals_the_serial_one():
    trace = job_trace(JobSpec(DatasetShape.uniform(300, 1000, size_spread=1.0), epochs=2, world_size=2))
    base = StackSpec("lfu", 0, "lfu", 100_000)
    serial = run_sweep(trace, base, "warm", [20_000, 80_000], ("lfu", "lru"), epochs=2, workers=1)
    parallel = run_sweep(trace, base, "warm", [20_000, 80_000], ("lfu", "lru"), epochs=2, workers=2)
    assert [(p.policy, p.capacity_bytes, p.result.cold_bytes) for p in serial.points] == \
        [(p.policy, p.capacity_bytes, p.result.cold_bytes) for p in parallel.points]
    assert not serial.min_hits  # MIN is for the hot tier


def test_cli_sweep_prints_json_and_writes_the_chart(tmp_path):
    chart = tmp_path / "sweep.png"
    result = CliRunner().invoke(cli, ["policy", "simulate", "configs/default.yaml", "--dataset", "300",
                                      "--epochs", "2", "--world-size", "2", "--workers", "4", "--batch-size", "32",
                                      "--warm-capacity", "50%", "--sweep", "hot=10%..100%/3",
                                      "--hot-policies", "clairvoyant,lru", "--plot", str(chart), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["points"]) == 6 and len(data["min"]) == 3 and set(data["knee"]) == {"clairvoyant", "lru"}
    assert all(point["usd_per_run"] > 0 for point in data["points"])
    assert data["setup"]["nodes"] == 2 and data["setup"]["epochs"] == 2
    assert data["setup"]["dataloader_workers"] == 4 and data["setup"]["batch_size"] == 32
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = CliRunner().invoke(cli, ["policy", "simulate", "configs/default.yaml", "--dataset", "300",
                                     "--sweep", "hot=10%,50%", "--hot-policies", "keep"])
    assert table.exit_code == 0, table.output
    assert "knee" in table.stdout and "MIN" in table.stdout


def test_plot_without_matplotlib_fails_before_the_sweep_with_the_extra_to_install(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    trace = tmp_path / "trace.txt"
    # sys.modules[name] = None makes `import matplotlib` raise ImportError, as on a clean install.
    script = ("import sys; sys.modules['matplotlib'] = None; from tierload.cli.main import cli; "
              "cli(sys.argv[1:], prog_name='tierload')")
    result = subprocess.run([sys.executable, "-c", script, "policy", "simulate", str(root / "configs/default.yaml"),
                             "--dataset", "300", "--sweep", "hot=10%,50%", "--hot-policies", "keep",
                             "--save-trace", str(trace), "--plot", str(tmp_path / "sweep.png")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "MissingDependencyError" in result.stderr and "tierload[bench]" in result.stderr, result.stderr
    assert "policy validate" not in result.stderr  # the ConfigError hint does not apply
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not trace.exists()  # refused before the trace was generated, let alone swept


def test_dataset_from_an_s3_listing(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 12, size=1000)
    # One block per object here (packing off): the listing's own sizes reach the simulator.
    data = {"cold": {"storage_options": s3.storage_options},
            "manifest": {"cache_dir": str(tmp_path / "manifests"), "pack_target_bytes": 0}}
    shape = dataset_shape(f"s3://{name}/ds", load_config(data), block_bytes=1)
    assert shape.num_blocks == 12 and shape.block_bytes.tolist() == [1000] * 12
    assert shape.name == f"s3://{name}/ds"
    # The command line: the same listing (now from the manifest cache), 2 jobs of 3 epochs on 2 nodes each.
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli, ["policy", "simulate", str(config_file), "--dataset", f"s3://{name}/ds",
                                      "--epochs", "3", "--world-size", "2", "--jobs", "2", "--hot-capacity", "25%",
                                      "--json"])
    assert result.exit_code == 0, result.output
    setup = json.loads(result.stdout)["setup"]
    assert setup["accesses"] == 2 * 3 * 12 and setup["blocks"] == 12 and setup["nodes"] == 4
    assert setup["working_set_bytes"] == 12_000


def test_fast_trace_generation_equals_job_trace():
    rng = np.random.default_rng(3)
    for case in range(30):
        shape = DatasetShape.uniform(int(rng.integers(3, 90)), 10, samples_per_block=int(rng.choice([1, 1, 4])))
        other = DatasetShape.uniform(int(rng.integers(3, 50)), 10, name="other")
        jobs = []
        for j in range(int(rng.integers(1, 4))):
            ranks = int(rng.integers(1, 7))
            jobs.append(JobSpec(shape if j % 2 == 0 or rng.random() < 0.5 else other, epochs=int(rng.integers(1, 4)),
                                seed=j, world_size=ranks, nodes=max(1, ranks // 2), drop_last=bool(rng.random() < 0.3),
                                start=float(rng.choice([0, 0.5, 1.25])) * j,
                                shuffle=str(rng.choice(["auto", "none", "block"]))))
        fast, reference = fast_job_trace(jobs), job_trace(jobs)
        for column in ("block", "node", "epoch", "job", "block_bytes"):
            assert np.array_equal(getattr(fast, column), getattr(reference, column)), (case, column)
