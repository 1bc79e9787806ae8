"""Hardness (issue 26 #13, N07): a new user's first mistakes against the local S3 (moto over HTTP).

A typo in ``storage_options``, no credentials, an endpoint without a scheme and a bucket named
without ``s3://`` are each one :class:`ConfigError` naming the bad value and the fix, from
``TieredDataset`` and, as one line with the config error's exit code and no traceback, from
``tierload warm`` (a real subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from tierload.errors import ConfigError
from tierload.loader.dataset import TieredDataset


def _no_aws_environment(home) -> dict[str, str]:
    """This environment without any AWS credential source (and no instance metadata to ask)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(HOME=str(home), AWS_SHARED_CREDENTIALS_FILE=str(home / "none"), AWS_CONFIG_FILE=str(home / "none"),
               AWS_EC2_METADATA_DISABLED="true")
    return env


def _mistakes(s3, name: str) -> dict[str, tuple[str, dict, str]]:
    """Mistake -> (url, cold settings, what the message must say)."""
    endpoint = s3.endpoint_url
    credentials = {"key": s3.storage_options["key"], "secret": s3.storage_options["secret"]}
    return {
        "typo": (f"s3://{name}/ds", {"endpoint_url": endpoint, "storage_options": {**credentials, "client_kwarg": {}}},
                 "'client_kwarg'.*did you mean 'client_kwargs'"),
        "no credentials": (f"s3://{name}/ds", {"endpoint_url": endpoint}, "no AWS credentials.*AWS_ACCESS_KEY_ID"),
        "no scheme": (f"s3://{name}/ds", {"endpoint_url": endpoint.removeprefix("http://"),
                                          "storage_options": credentials},
                      f"'{endpoint.removeprefix('http://')}' is not a URL.*{endpoint}"),
        "bucket without s3://": (f"{name}/ds", {"endpoint_url": endpoint, "storage_options": credentials},
                                 f"give s3://{name}/ds"),
    }


@pytest.mark.parametrize("mistake", ["typo", "no credentials", "no scheme", "bucket without s3://"])
def test_a_first_mistake_is_one_config_error_with_the_fix(s3, bucket, tmp_path, monkeypatch, mistake):
    name, fs = bucket
    fs.pipe_file(f"{name}/ds/a.bin", b"12345678")
    monkeypatch.chdir(tmp_path)  # where the bare bucket name is no directory either
    for variable, value in _no_aws_environment(tmp_path).items():
        monkeypatch.setenv(variable, value)
    for variable in [v for v in os.environ if v.startswith("AWS_") and v not in _no_aws_environment(tmp_path)]:
        monkeypatch.delenv(variable)
    url, cold, message = _mistakes(s3, name)[mistake]
    config = {"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": None},
              "manifest": {"cache_dir": str(tmp_path / "manifests")}, "cold": {"max_attempts": 1, **cold}}
    with pytest.raises(ConfigError, match=message):
        TieredDataset(url, config, lazy=False)


@pytest.mark.parametrize("mistake", ["typo", "no credentials", "no scheme", "bucket without s3://"])
def test_a_first_mistake_is_one_line_from_tierload_warm(s3, bucket, tmp_path, mistake):
    import re

    name, fs = bucket
    fs.pipe_file(f"{name}/ds/a.bin", b"12345678")
    url, cold, message = _mistakes(s3, name)[mistake]
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump({"hot": {"dir": str(tmp_path / "hot")},
                                           "warm": {"url": str(tmp_path / "warm")},
                                           "manifest": {"cache_dir": str(tmp_path / "manifests")},
                                           "cold": {"max_attempts": 1, **cold}}))
    result = subprocess.run([sys.executable, "-m", "tierload.cli.main", "warm", url, "--config", str(config_file)],
                            cwd=tmp_path, env=_no_aws_environment(tmp_path), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr  # ConfigError's exit code (tierload/cli/errors.py)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("tierload: ConfigError: ") and re.search(message, lines[0]), lines[0]
