"""``tierload warm``: pre-staging into the warm tier on a real S3 (moto over HTTP) and real directories."""

from __future__ import annotations

import threading

import pytest
import yaml
from click.testing import CliRunner
from helpers import put_indexed_objects, tier_bytes

import tierload.deploy.prestage as prestage_module
from tierload.cli.main import cli
from tierload.deploy.prestage import prestage

OBJECTS, SIZE = 40, 3000


@pytest.fixture
def dataset(s3, bucket, tier_config, tmp_path):
    """40 objects of 3,000 bytes on S3 (one block each), and a config file whose warm tier is
    ``warm`` bytes: ``(url, make_config(warm) -> (config, path))``."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=SIZE)

    def make(warm="1MiB"):
        config = tier_config(warm=warm, cold={"storage_options": s3.storage_options},
                             manifest={"layout": "files"})
        path = tmp_path / "job.yaml"
        path.write_text(yaml.safe_dump(config.to_dict()))
        return config, str(path)
    return f"s3://{name}/ds", make


def _warm(url: str, path: str, *args: str):
    result = CliRunner().invoke(cli, ["warm", url, "--config", path, *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_warm_stages_every_block_once_and_a_second_run_reads_nothing(dataset, tmp_path):
    url, make = dataset
    config, path = make()
    output = _warm(url, path)
    assert f"staged now: {OBJECTS}" in output and f"in {OBJECTS} cold GETs" in output
    assert tier_bytes(tmp_path / "warm") >= OBJECTS * SIZE
    again = _warm(url, path)
    assert f"already there: {OBJECTS}" in again and "staged now: 0" in again and "in 0 cold GETs" in again


def test_an_interrupted_run_resumes_where_it_stopped(dataset, monkeypatch):
    url, make = dataset
    config, _path = make()
    monkeypatch.setattr(prestage_module, "BATCH_BLOCKS", 8)  # five batches of 8 blocks
    stop = threading.Event()
    first = prestage(url, config, epochs=2, on_progress=lambda result: result.staged_blocks >= 8 and stop.set(),
                     stop=stop)
    assert first.interrupted and first.staged_blocks == 8 and first.skipped_blocks == OBJECTS - 8
    second = prestage(url, config, epochs=2)
    assert not second.interrupted and second.present_blocks == 8 and second.staged_blocks == OBJECTS - 8
    assert second.cold_gets == OBJECTS - 8  # nothing staged before was read again


def test_a_selection_larger_than_the_warm_tier_fills_it_and_says_what_did_not_fit(dataset, tmp_path):
    url, make = dataset
    capacity = 16 * (SIZE + 64)  # room for about 16 of the 40 blocks (frames carry a header)
    config, path = make(warm=capacity)
    output = _warm(url, path)
    assert "did not fit" in output and "Raise warm.capacity_bytes" in output
    assert 0 < tier_bytes(tmp_path / "warm") <= capacity  # never past its capacity


def test_fraction_stages_the_blocks_needed_first(dataset):
    url, make = dataset
    config, _path = make()
    result = prestage(url, config, fraction=0.25)
    assert result.planned_blocks == OBJECTS // 4 and result.staged_blocks == OBJECTS // 4


def test_a_job_after_warm_reads_nothing_from_cold_in_its_first_epoch(dataset, make_dataset):
    url, make = dataset
    config, path = make()
    _warm(url, path)
    job = make_dataset(url, config, layout="files", batch_size=4)
    job.set_epoch(0)
    assert sum(1 for _ in job) == OBJECTS
    stats = job.epoch_stats(0)
    sources = {name: stats.get(name, 0) for name in ("accesses", "hot_hits", "peer_hits", "warm_hits", "cold_gets")}
    # Nothing from cold is the point of pre-staging. In the whole suite (a Ray session other tests'
    # node caches share) 3 of the 40 blocks were once served from a source other than warm: that is
    # not a cold read, and which one it was is printed if this fails.
    assert sources["accesses"] == OBJECTS and sources["cold_gets"] == 0, (sources, dict(job.consumer_stats))
    assert sources["warm_hits"] >= OBJECTS // 2, sources  # the staged warm tier served the epoch


def test_warm_goes_through_a_running_service_and_refuses_an_unreachable_owner(dataset, make_dataset, tmp_path):
    import ray
    from test_cli_output import run_cli

    url, make = dataset
    config, path = make()
    job = make_dataset(url, config, layout="files", batch_size=4)  # its node cache and coordinator run now
    refused = run_cli("warm", url, "--config", path, cwd=tmp_path, env={"RAY_ADDRESS": ""})
    assert refused.returncode == 5 and "owns the warm tier" in refused.stderr, refused.stderr
    result = prestage(url, config, address=ray.get_runtime_context().gcs_address)
    assert result.where.startswith("the service at") and result.staged_blocks == OBJECTS
    job.set_epoch(0)
    assert sum(1 for _ in job) == OBJECTS
    assert job.epoch_stats(0)["cold_gets"] == 0


def test_a_warm_tier_smaller_than_every_block_reads_nothing_and_fails_in_one_line(dataset, tmp_path):
    url, make = dataset
    _config, path = make(warm="1KiB")  # every block is 3,000 bytes
    result = CliRunner().invoke(cli, ["warm", url, "--config", path])
    assert result.exit_code == 1, result.output
    assert "in 0 cold GETs" in result.stdout and f"too large: {OBJECTS} blocks" in result.stdout  # nothing downloaded
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and "CapacityError: nothing could be staged" in errors[0], result.stderr
    assert "warm.capacity_bytes is 1.0 KiB" in errors[0] and "largest block 2.9 KiB" in errors[0], errors
    assert tier_bytes(tmp_path / "warm") == 0
