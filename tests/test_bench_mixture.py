"""The mixture workload of ``tierload bench`` (issue 22, item 6), end to end on a tiny pair of sources:
every epoch has the weights' exact counts per source, the report has samples/s, hot hit, MIN and S3
bytes, and the hot tier's hits stay at MIN (within test_sim_agreement's tolerance)."""

from __future__ import annotations

import dataclasses


def test_mixture_workload_smoke(tmp_path):
    from tierload_tools.bench.mixture.run import MixtureOptions, run_mixture, table, write

    # 300 blocks: the hot tier's quarter (75 blocks) holds the prefetch window (64), so MIN bounds its hits
    options = dataclasses.replace(MixtureOptions.quick(), web_files=150, code_files=150, object_kib=4, batch_size=8,
                                  latency_ms=0, connection_mb_s=0, total_mb_s=0, cache_dir=str(tmp_path / "data"))
    result = run_mixture(options, tmp_path / "out", echo=lambda line: None, timeout_s=300)
    paths = write(result, tmp_path / "out")
    run = result["contenders"]["tierload-mixture"]
    assert run["ok"], run.get("error")
    assert [row["per_source"] for row in run["epochs"]] == [{"0": 210, "1": 90}] * options.epochs
    first = run["epochs"][0]
    # epoch 1 reads all 150 web objects (210 draws: one pass and 60 of the next) and 90 of code's 150
    assert first["s3_gets"] >= 240 and first["s3_bytes"] >= 240 * 4096
    assert all(row["samples_per_s"] > 0 for row in run["epochs"])
    # Objects of one size: MIN is the optimum, the ceiling of the hot hits over the whole run (a read
    # served by a copy staged for the prefetch window is a staged hit, not a hot one). Checked with
    # tests/test_sim_agreement.py's tolerance, as live and simulated counts are compared there.
    assert all(row["min_exact"] for row in run["epochs"])
    accesses = sum(row["accesses"] for row in run["epochs"])
    min_hits = sum(row["min_hit_ratio"] * row["accesses"] for row in run["epochs"])
    assert min_hits > 0 and sum(row["hot_hits"] for row in run["epochs"]) <= min_hits + 0.05 * accesses
    assert "per source" in paths["txt"].read_text() and "210/90" in table(result)
