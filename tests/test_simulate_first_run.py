"""The first ``tierload policy simulate`` after an install (issue 25, item 3): it says what it is
doing, replays a small trace with the reference engine while the compiled replay builds in the
background, and prints what the compiled replay prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

import tierload.cli.replay_engine as replay_engine
import tierload.simulator.fast.readiness as readiness
from tierload.cli.main import cli

CONFIG = str(Path(__file__).resolve().parent.parent / "configs" / "default.yaml")
ARGS = ["policy", "simulate", CONFIG, "--dataset", "800", "--epochs", "3", "--json"]
TIMINGS = ("seconds", "cpu_seconds", "accesses_per_s")


def _decisions(output: str) -> dict:
    """The JSON report without its timings (the same run differs only there)."""
    report = json.loads(output)
    report["rows"] = [{k: v for k, v in row.items() if k not in TIMINGS} for row in report["rows"]]
    report["min"].pop("accesses_per_s")
    return report


def _end_build(pid: int) -> None:
    """End the background compile the command left to finish (the test's cache dir goes away)."""
    try:
        build = psutil.Process(pid)
        assert "warm_up" in " ".join(build.cmdline())
        build.kill()
        build.wait(30)
    except psutil.NoSuchProcess:
        pass  # it finished already


def test_a_first_run_says_so_and_replays_what_the_compiled_replay_does(tmp_path, compiled_simulator):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # nothing compiled in it
    first = subprocess.run([sys.executable, "-m", "tierload.cli.main", *ARGS], capture_output=True, text=True,
                           env=env, timeout=300)
    built = re.search(r"in the background \(pid (\d+)", first.stderr)
    if built:
        _end_build(int(built.group(1)))
    assert first.returncode == 0, first.stderr
    assert "compiled replay is not built yet" in first.stderr and "reference engine" in first.stderr, first.stderr
    assert built, first.stderr
    # The same command where the compiled replay is built (this process's cache: compiled_simulator).
    assert readiness.is_compiled()
    compiled = CliRunner().invoke(cli, ARGS)
    assert compiled.exit_code == 0, compiled.output
    assert "not built" not in compiled.stderr
    assert _decisions(first.stdout) == _decisions(compiled.stdout)


def test_a_trace_too_large_for_the_reference_waits_for_the_compile_and_says_so(monkeypatch, compiled_simulator):
    monkeypatch.setattr(readiness, "is_compiled", lambda: False)  # as after an install
    monkeypatch.setattr(replay_engine, "REFERENCE_ACCESSES", 1000)
    result = CliRunner().invoke(cli, ARGS)
    assert result.exit_code == 0, result.output
    assert "compiling the simulator's replay" in result.stderr and "accesses to replay" in result.stderr
    assert json.loads(result.stdout)["rows"][0]["accesses"] == 2400


@pytest.mark.parametrize("accesses, engine", [(10, "reference"), (10**9, "auto")])
def test_the_engine_follows_the_trace_size_until_the_replay_is_built(monkeypatch, accesses, engine,
                                                                      compiled_simulator):
    monkeypatch.setattr(readiness, "is_compiled", lambda: False)
    started: list[int] = []
    monkeypatch.setattr(replay_engine, "_build_in_background", lambda: started.append(1) or 1)
    assert replay_engine.choose_engine(accesses) == engine
    assert started == ([1] if engine == "reference" else [])
