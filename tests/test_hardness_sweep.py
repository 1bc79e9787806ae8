"""Hardness (issue 26 #9): a warm sweep's --json, and a sweep chart whose equal curves stay told apart."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tierload.cli.main import cli
from tierload.config.models import CostConfig
from tierload.simulator.stack import StackSpec
from tierload.simulator.sweep import run_sweep
from tierload.simulator.trace import DatasetShape, JobSpec, job_trace

pytestmark = pytest.mark.usefixtures("compiled_simulator")

MiB = 2**20


def test_warm_sweep_prints_json_with_no_min_rows():
    result = CliRunner().invoke(cli, ["policy", "simulate", "configs/default.yaml", "--dataset", "200",
                                      "--epochs", "2", "--warm-capacity", "50%", "--sweep", "warm=10%,50%",
                                      "--warm-policies", "keep,lfu", "--processes", "1", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["tier"] == "warm" and data["min"] == []  # MIN is the hot tier's alone
    assert len(data["points"]) == 4 and set(data["knee"]) == {"keep", "lfu"}


def test_chart_tells_coinciding_curves_and_knees_apart():
    from tierload.simulator.sweep_report import draw_sweep

    trace = job_trace(JobSpec(DatasetShape.uniform(200, MiB), epochs=3, world_size=2))
    policies = ("keep", "lfu", "lfu-size", "lru")
    sweep = run_sweep(trace, StackSpec("keep", 20 * MiB, "lfu", 100 * MiB), "warm", [20 * MiB, 100 * MiB, 200 * MiB],
                      policies, epochs=3, cost=CostConfig(), workers=1)
    # Equal blocks: lfu-size weighs every block alike, so its curve is lfu's (the chart's hard case).
    assert [p.result.cold_bytes for p in sweep.line("lfu")] == [p.result.cold_bytes for p in sweep.line("lfu-size")]
    import matplotlib.pyplot as plt

    figure = draw_sweep(sweep, "t")
    try:
        top = figure.axes[0]
        curves = {line.get_label(): line for line in top.get_lines() if line.get_label() in policies}
        assert set(curves) == set(policies)
        styles = {(line.get_linestyle(), line.get_marker()) for line in curves.values()}
        assert len(styles) == len(policies)  # every policy's curve looks different
        knees = [line for line in top.get_lines() if line.get_label().startswith("_") and len(line.get_xdata()) == 1]
        assert len(knees) == len(policies)
        by_point: dict[tuple, list] = {}
        for knee in knees:
            by_point.setdefault((knee.get_xdata()[0], knee.get_ydata()[0]), []).append(knee)
        for stacked in by_point.values():  # knees at one point: each its own shape and size
            assert len({(k.get_marker(), k.get_markersize()) for k in stacked}) == len(stacked)
        notes = [text.get_text() for text in top.get_legend().get_texts()]
        coincide = [note.removeprefix("curves coincide: ").split(" = ") for note in notes
                    if note.startswith("curves coincide: ")]
        assert any({"lfu", "lfu-size"} <= set(names) for names in coincide), notes
        shared = [names for names in by_point.values() if len(names) > 1]
        assert not shared or any(note.startswith("knees at one point: ") for note in notes)
    finally:
        plt.close(figure)
