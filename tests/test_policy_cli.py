"""``tierload policy``: show, validate (every problem, with its line), simulate, and set's refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tierload.cli.main import cli
from tierload.config.check import check_config_file
from tierload.config.loading import load_config

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))

BAD = """\
# three problems in three sections, and a duplicate
hot:
  capacity_bytes: ten gigs
policy:
  hot:
    eviction: lfuu
  warm:
    eviction: clairvoyant
  decay:
    half_life: 0
    unit: epochs
  polcy: 3
warm:
  url: /a
warm:
  url: /b
"""


def invoke(*args):
    return CliRunner().invoke(cli, ["policy", *args])


@pytest.fixture
def bad_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    return path


def test_shipped_configs_are_valid():
    assert {path.name for path in CONFIGS} >= {"default.yaml", "small-hot-tier.yaml", "shared-warm-multi-job.yaml"}
    for path in CONFIGS:
        result = invoke("validate", str(path))
        assert result.exit_code == 0, result.output
        assert result.stdout.strip().endswith("valid")


def test_validate_reports_every_problem_with_its_line_and_key(bad_file):
    result = invoke("validate", str(bad_file))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    expected = [("line 3:", "hot.capacity_bytes:", "ten gigs"),
                ("line 6:", "policy.hot.eviction:", "lfuu"),
                ("line 8:", "policy.warm.eviction:", "clairvoyant"),
                ("line 10:", "policy.decay.half_life:", "greater than 0"),
                ("line 11:", "policy.decay.unit:", "epochs"),
                ("line 12:", "policy.polcy:", "unknown key"),
                ("line 15:", "warm:", "duplicate key (first set on line 13)")]
    assert len(lines) == len(expected) + 1 and "7 problem(s)" in lines[-1]
    for line, (where, key, what) in zip(lines, expected):
        assert line.startswith(f"{bad_file}: {where} {key}") and what in line, line


def test_validate_points_at_a_yaml_syntax_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("hot:\n  capacity_bytes: [1\npolicy: {}\n")
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "line 3: not valid YAML" in result.stderr


def test_check_config_file_returns_the_config_when_valid(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("policy:\n  warm:\n    eviction: lfu-size\n    get_cost_bytes: 4MiB\n")
    config, problems = check_config_file(path)
    assert problems == [] and config.policy.warm.eviction == "lfu-size"
    assert config.policy.warm.get_cost_bytes == 4 * 2**20
    assert config.hot.capacity_bytes == load_config().hot.capacity_bytes  # defaults filled in


def test_set_refuses_an_invalid_file_and_changes_nothing(bad_file):
    result = invoke("set", str(bad_file))
    assert result.exit_code == 2
    assert "policy.hot.eviction" in result.stderr and "line 6" in result.stderr
    assert "refused, the running policy is unchanged" in result.stderr


def test_show_prints_the_effective_config_with_defaults_filled_in(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("policy:\n  hot:\n    eviction: keep\n")
    shown = yaml.safe_load(invoke("show", str(path)).stdout)
    assert shown["policy"]["hot"] == {"eviction": "keep", "admit_min_count": 1.0, "get_cost_bytes": 2**20}
    assert shown == load_config(path).to_dict()
    assert json.loads(invoke("show", "--json").stdout) == load_config().to_dict()


def test_simulate_json_puts_every_policy_side_by_side():
    result = invoke("simulate", str(CONFIGS[0]), "--dataset", "400", "--epochs", "3", "--hot-capacity", "25%",
                    "--warm-capacity", "50%", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["setup"]["accesses"] == 1200 and data["setup"]["hot_capacity_bytes"] == 100 * 2**20
    rows = {(row["hot_policy"], row["warm_policy"]): row for row in data["rows"]}
    assert data["rows"][0]["configured"] and ("clairvoyant", "lfu") in rows and ("clairvoyant", "lru") in rows
    assert rows[("clairvoyant", "lfu")]["hot_hit_ratio"] == pytest.approx(data["min"]["hot_hit_ratio"])
    assert rows[("lru", "lfu")]["hot_hit_ratio"] < rows[("keep", "lfu")]["hot_hit_ratio"]


def test_simulate_a_recorded_trace_and_save_one(tmp_path):
    saved = tmp_path / "trace.parquet"
    first = invoke("simulate", str(CONFIGS[0]), "--dataset", "200", "--epochs", "2", "--hot-capacity", "50MiB",
                   "--warm-capacity", "0", "--hot-policies", "clairvoyant,lru", "--save-trace", str(saved))
    assert first.exit_code == 0, first.output
    assert "no warm tier" in first.stdout and "lru" in first.stdout
    again = invoke("simulate", str(CONFIGS[0]), "--trace", str(saved), "--hot-capacity", "50MiB",
                   "--warm-capacity", "0", "--hot-policies", "clairvoyant,lru")
    assert again.exit_code == 0

    def counts(output):  # the table without its last column (replay speed)
        return [line.rsplit(maxsplit=1)[0] for line in output.splitlines() if line.startswith(("*", "  "))]

    assert counts(again.stdout) == counts(first.stdout) and len(counts(first.stdout)) == 4


@pytest.mark.parametrize("args, message", [
    (["--hot-capacity", "lots"], "neither a size"),
    (["--hot-policies", "mru"], "unknown mru"),
])
def test_simulate_rejects_bad_options(args, message):
    result = invoke("simulate", str(CONFIGS[0]), "--dataset", "100", *args)
    assert result.exit_code == 2 and message in result.output


def test_simulate_refuses_an_invalid_policy_file(bad_file):
    result = invoke("simulate", str(bad_file), "--dataset", "100")
    assert result.exit_code == 2 and "line 3" in result.stderr
