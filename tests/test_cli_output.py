"""The command line's output: one line per error, its exit code, no library chatter; the README's
snippet works from any directory. Run as a user would: a fresh process, from another directory."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tierload.config.loading import load_config

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """``tierload ARGS`` in a fresh process whose working directory is ``cwd`` (not the repository)."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", **(env or {})}
    if "TIERLOAD_DEBUG" not in (env or {}):
        environ.pop("TIERLOAD_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "tierload.cli.main", *args], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def unreachable_config(tmp_path) -> Path:
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump({"cold": {"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1,
                                             "outage_budget_s": 0, "connect_timeout_s": 2}}))
    return path


def test_an_unreachable_endpoint_is_one_line_with_a_hint_and_its_exit_code(tmp_path, unreachable_config):
    result = run_cli("policy", "simulate", str(unreachable_config), "--dataset", "s3://bucket/train",
                     "--epochs", "1", cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tierload: EndpointUnreachableError: "), result.stderr
    assert "hint: check cold.endpoint_url" in lines[0] and "127.0.0.1:9" in lines[0]
    assert result.stdout == ""


def test_the_traceback_comes_with_tierload_debug(tmp_path, unreachable_config):
    result = run_cli("policy", "simulate", str(unreachable_config), "--dataset", "s3://bucket/train",
                     "--epochs", "1", cwd=tmp_path, env={"TIERLOAD_DEBUG": "1"})
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr and "EndpointUnreachableError" in result.stderr


def test_a_service_error_on_a_fresh_local_ray_prints_no_ray_notice(tmp_path):
    config = tmp_path / "policy.yaml"  # its own hot.dir: no service runs for it
    config.write_text(yaml.safe_dump({"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": None},
                                      "ray": {"num_cpus": 1}}))
    result = run_cli("policy", "set", str(config), cwd=tmp_path)
    assert result.returncode == 5, result.stderr
    output = (result.stdout + result.stderr).strip().splitlines()
    assert len(output) == 1 and output[0].startswith("tierload: ServiceError: no tierload actors run"), output
    assert "Token authentication" not in result.stderr


def _readme_config_argument():
    """The second positional argument of ``TieredDataset(...)`` in the README's Python snippet."""
    snippet = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    call = next(node for node in ast.walk(ast.parse(snippet))
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "TieredDataset")
    return ast.literal_eval(call.args[1])


def test_the_readme_snippet_config_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(_readme_config_argument())
    assert config.hot.capacity_bytes > 0
