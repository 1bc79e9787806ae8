"""The public API is what ``__all__`` says, sorted; the CLI maps errors to one line and a code."""

from __future__ import annotations

import click
import pytest
import yaml
from click.testing import CliRunner

import tierload
from tierload.cli.errors import EXIT_CODES, exit_code_of, handle_errors
from tierload.cli.main import cli
from tierload.errors import (
    BackendError,
    CapacityError,
    ConfigError,
    EndpointUnreachableError,
    IntegrityError,
    ManifestError,
    MissingDependencyError,
    ServiceError,
    StreamNotOpenError,
)


def test_all_is_the_sorted_public_api():
    assert tierload.__all__ == sorted(tierload.__all__)
    for name in tierload.__all__:
        assert getattr(tierload, name).__doc__, f"{name} has no docstring"


def test_every_error_is_a_tierload_error_and_a_builtin():
    for name in tierload.__all__:
        cls = getattr(tierload, name)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not tierload.TierloadError:
            assert issubclass(cls, tierload.TierloadError)
            assert any(base.__module__ == "builtins" for base in cls.__mro__[1:-1])


def test_cli_rejects_a_bad_option_through_click_and_prints_the_version():
    result = CliRunner().invoke(cli, ["demo", "--epochs", "0"])
    assert result.exit_code == 2 and "--epochs" in result.output  # click's usage error, not tierload's mapping
    assert "tierload: " not in result.output
    assert CliRunner().invoke(cli, ["--version"]).output.strip().endswith(tierload.__version__)


@pytest.mark.parametrize("error, code", [
    (ConfigError("x"), 2), (ManifestError("x"), 3), (BackendError("x"), 4), (EndpointUnreachableError("x"), 4),
    (ServiceError("x"), 5), (StreamNotOpenError("x"), 5), (IntegrityError("x"), 1), (CapacityError("x"), 1),
    (MissingDependencyError("x"), 1)])
def test_every_error_class_maps_to_its_exit_code(error, code):
    assert exit_code_of(error) == code
    assert len({c for _, c in EXIT_CODES}) == len(EXIT_CODES)  # no two classes share a code


def _one_line_error(result, exit_code: int, error_class: str) -> str:
    """The single ``tierload: Class: message`` line a command printed for a tierload error (the
    message may go on over more lines)."""
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("tierload: ")]
    assert len(lines) == 1 and lines[0].startswith(f"tierload: {error_class}: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_a_bad_config_value_exits_with_the_config_error_code(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("prefetch:\n  depth_blocks: -1\n")
    result = CliRunner().invoke(cli, ["policy", "show", str(bad)])
    _one_line_error(result, 2, "ConfigError")  # tierload's mapping: click prints no such line
    assert "prefetch.depth_blocks" in result.output


def _dataset_command(url: str, config, storage_options: dict) -> click.Command:
    """A command that opens a dataset, as an application's CLI built on tierload's error mapping
    would (no shipped command lists a dataset: the listing is the first thing a dataset does)."""
    @click.command()
    def open_dataset() -> None:
        from tierload.loader.dataset import TieredDataset

        handle_errors(TieredDataset)(url, config, storage_options=storage_options)
    return open_dataset


def test_an_empty_prefix_exits_with_the_manifest_error_code(s3, bucket, tier_config):
    name, _fs = bucket
    command = _dataset_command(f"s3://{name}/nothing-here", tier_config(), s3.storage_options)
    assert "holds no objects" in _one_line_error(CliRunner().invoke(command), 3, "ManifestError")


def test_warm_with_an_unknown_layout_exits_with_the_config_error_code(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x")
    result = CliRunner().invoke(cli, ["warm", f"file://{tmp_path}", "--layout", "file"])
    assert "unknown layout 'file'; choose one of" in _one_line_error(result, 2, "ConfigError")
    bare = CliRunner().invoke(cli, ["warm", str(tmp_path)])  # the job would refuse it: so does warm
    assert f"or file://{tmp_path} for that local directory" in _one_line_error(bare, 2, "ConfigError")


def test_an_unreachable_endpoint_exits_with_the_backend_error_code(tier_config):
    config = tier_config(cold={"max_attempts": 1, "connect_timeout_s": 2})
    unreachable = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}, "key": "k", "secret": "s"}
    command = _dataset_command("s3://bucket/train", config, unreachable)
    _one_line_error(CliRunner().invoke(command), 4, "EndpointUnreachableError")


def test_setting_a_policy_with_no_service_running_exits_with_the_service_error_code(ray_session, tier_config,
                                                                                      tmp_path):
    file = tmp_path / "policy.yaml"
    file.write_text(yaml.safe_dump(tier_config().to_dict()), encoding="utf-8")  # its own hot.dir: no actors
    result = CliRunner().invoke(cli, ["policy", "set", str(file)])
    assert "no tierload actors run" in _one_line_error(result, 5, "ServiceError")


def test_the_wheel_lists_every_package_of_the_source_tree():
    """pyproject names packages one by one: a new sub-package left out works in an editable
    install and is missing from a regular one."""
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(root).parts) for init in (root / "tierload").rglob("__init__.py")}
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
