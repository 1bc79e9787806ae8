"""The small-object workloads of ``tierload bench`` (issue 11), end to end on 300-object variants:
each workload's smoke run, the other loaders' runs on them (issue 16) and which of them run.

Moved from tests/test_bench.py unchanged (that module had grown past 450 lines).
"""

from __future__ import annotations

import contextlib

import pytest


# ----------------------------------------------------------------- smoke runs of the small workloads
@contextlib.contextmanager
def without_metrics():
    """The contenders' own local Rays start without Ray's metrics agent (``metrics.enabled: false``, which
    their processes inherit): these runs check samples and reports, not metrics, and the agent costs each
    Ray start CPU (this module, cpuacct: 87.9 -> 79.5 CPU-s). tests/test_local_ray_footprint.py checks both."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIERLOAD_METRICS__ENABLED", "false")
        yield


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """``run(workload)``: (options, result, out dir) of one 300-object run of a small-object workload
    with the other loaders, made once per module: the smoke and the peers tests check the same run
    (every check is per object or per loader), not two runs each paying processes, Ray and the data."""
    import dataclasses

    from tierload_tools.bench.small.run import SmallOptions, run_small

    runs: dict[str, tuple] = {}

    def run(workload: str) -> tuple:
        if workload not in runs:
            folder = tmp_path_factory.mktemp(workload)
            options = dataclasses.replace(SmallOptions.smoke(workload), count=300, classes=3,
                                          cache_dir=str(folder / "data"), size=4096 if workload == "small-s3" else 1024)
            with without_metrics():
                result = run_small(options, folder / "out", echo=lambda line: None, timeout_s=300)
            runs[workload] = options, result, folder / "out"
        return runs[workload]

    return run


@pytest.mark.parametrize("workload", ["small-files", "small-s3", "startup"])
def test_small_workload_smoke(workload, tmp_path, small_run):
    """A 300-object variant of each small-object workload (startup: a 5,000-key listing) runs end to
    end and reports its targets. 300, not the smoke preset's 2,000: the checks are per object, and
    the fixed costs (processes, Ray) dominate either way. small-files and small-s3 check the run
    test_small_workload_peers_smoke checks (``small_run``), so the other loaders' runs must pass too."""
    import dataclasses

    from tierload_tools.bench.small import report
    from tierload_tools.bench.small.run import SmallOptions, run_small

    if workload == "startup":  # does not use the count, and runs no other loader
        options = dataclasses.replace(SmallOptions.smoke(workload), count=500, cache_dir=str(tmp_path / "data"),
                                      size=1024, peers=False)
        with without_metrics():
            result, out = run_small(options, tmp_path / "out", echo=lambda line: None, timeout_s=300), tmp_path / "out"
    else:
        options, result, out = small_run(workload)
    paths = report.write(result, out)
    runs = [result.get("startup"), result.get("worker_memory"), *result.get("contenders", {}).values()]
    assert all(run["ok"] for run in runs if run is not None), [run.get("error") for run in runs if run]
    for run in result.get("contenders", {}).values():
        assert [row["samples"] for row in run["epochs"]] == [options.count] * options.epochs
    if workload == "small-s3":
        assert result["ceiling"]["objects"] == options.count
    if workload == "startup":
        assert result["startup"]["keys"] == options.startup_keys and not result["startup"]["steps_not_seen"]
        assert {r["epoch"] for r in result["worker_memory"]["reports"]} == {0, 1}
        assert result["baseline"]["ok"] and 0 < result["baseline"]["peak_rss_main_mb"]  # torch + DataLoader alone
        assert all(step["cpu_s"] >= 0 for step in result["startup"]["steps"].values())
    assert {check["target"] for check in result["targets"]} and paths["txt"].read_text()


@pytest.mark.parametrize("workload", ["small-files", "small-s3"])
def test_small_workload_peers_smoke(workload, small_run):
    """On a 300-object variant, the S3 Connector for PyTorch and Ray Data deliver every object each
    epoch (through the emulated S3 on small-s3: one GET per object per epoch, no cache), or are
    reported as not run with the reason."""
    options, result, _ = small_run(workload)
    assert options.peers and options.peer_loaders == ("s3torch", "raydata")
    contenders, not_run = result["contenders"], result.get("not_run", {})
    assert all(run["ok"] for run in contenders.values()), {n: r.get("error") for n, r in contenders.items()}
    expected = {"small-files": {"raydata-files"}, "small-s3": {"s3torch-s3", "raydata-s3"}}[workload]
    assert expected <= set(contenders) | set(not_run)
    if workload == "small-files":
        assert "S3 only" in not_run["s3torch-files"]
    for name in expected & set(contenders):
        assert [row["samples"] for row in contenders[name]["epochs"]] == [options.count] * options.epochs
        if workload == "small-s3":
            assert contenders[name]["s3"]["get_requests"] == options.count * options.epochs
            assert contenders[name]["s3"]["get_bytes"] == options.count * options.size * options.epochs


def test_small_workload_runs_only_the_peers_named(tmp_path, monkeypatch):
    """``peer_loaders`` (the CLI's ``--contenders`` on a small workload) picks which other loaders run.
    The workload's own rig runs for real (moto, the emulated S3, the ceiling probe); the contenders'
    processes are only recorded, not started: test_small_workload_smoke and
    test_small_workload_peers_smoke run each of them (this saved ~25 s of the suite)."""
    import dataclasses

    from tierload_tools.bench.small import run as small_run_module
    from tierload_tools.bench.small.run import SmallOptions, run_small

    started: list[str] = []

    def record(runner, name, setup, module="tierload_tools.bench.small.contenders", profile_to=None):
        started.append(name)
        return {"ok": True, "epochs": []}

    monkeypatch.setattr(small_run_module._Runner, "contender", record)
    options = dataclasses.replace(SmallOptions.smoke("small-s3"), count=300, classes=3, size=4096,
                                  cache_dir=str(tmp_path / "data"), peer_loaders=("s3torch",))
    result = run_small(options, tmp_path / "out", echo=lambda line: None, timeout_s=240)
    ran = set(result["contenders"]) | set(result.get("not_run", {}))
    assert ran == {"tierload-s3", "s3torch-s3"}, ran
    assert started == ["tierload-s3", "s3torch-s3"]
    with pytest.raises(ValueError, match="peer_loaders"):
        SmallOptions(workload="small-s3", peer_loaders=("streaming",))


def test_small_workload_contenders_option_names_only_small_peers():
    from click.testing import CliRunner

    from tierload_tools.bench.cli import bench

    outcome = CliRunner().invoke(bench, ["--workload", "small-s3", "--contenders", "tierload,s3fs"])
    assert outcome.exit_code == 2 and "unknown s3fs" in outcome.output, outcome.output
