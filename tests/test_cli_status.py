"""``tierload status`` and ``serve`` as a user meets them: nothing running, a node cache serving,
a job in progress. Each command runs in a fresh process, from another directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml
from helpers import put_indexed_objects
from test_cli_output import ROOT, run_cli

from tierload.config.loading import load_config
from tierload.coordinator.actor import Coordinator
from tierload.node.node_cache import NodeCache
from tierload.wire.api import CoordinatorAPI, LocalCaller


def _config_file(tmp_path, config) -> str:
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(config.to_dict() if hasattr(config, "to_dict") else config))
    return str(path)


def test_status_with_nothing_running_exits_3_without_importing_ray(tmp_path):
    path = _config_file(tmp_path, {"hot": {"dir": str(tmp_path / "hot")}})
    started = time.monotonic()
    result = run_cli("status", "--config", path, cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    assert "no tierload service for this configuration; run a job or `tierload serve`" in result.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "import time:" in line}
    assert "ray" not in imported  # Ray was never imported, let alone started
    assert elapsed < 30, elapsed  # < 2 s on an idle machine; this bound only catches a Ray start on a busy one


def test_status_with_a_ray_address_that_does_not_answer_exits_3(tmp_path):
    path = _config_file(tmp_path, {"hot": {"dir": str(tmp_path / "hot")}})
    result = run_cli("status", "--config", path, "--address", "127.0.0.1:9", cwd=tmp_path)
    assert result.returncode == 3 and "no tierload service" in result.stderr


def test_serve_without_a_cluster_refuses_and_says_how_to_start_one(tmp_path):
    path = _config_file(tmp_path, {"hot": {"dir": str(tmp_path / "hot")}})
    result = run_cli("serve", "--config", path, cwd=tmp_path, env={"RAY_ADDRESS": ""})
    assert result.returncode == 5, result.stderr
    assert "ray start --head" in result.stderr and "started" not in result.stdout
    assert not (tmp_path / "hot").exists()  # no actor was started


def test_status_reports_a_running_node_cache_and_the_warm_tier(tmp_path):
    config = load_config({"hot": {"dir": str(tmp_path / "hot"), "capacity_bytes": "3MiB"},
                          "warm": {"url": str(tmp_path / "warm"), "capacity_bytes": "5MiB"}})
    coordinator = Coordinator(config, node_alive=lambda: None).start()
    cache = NodeCache(config, node_id="node-status-test",
                      coordinator_call=LocalCaller(coordinator, CoordinatorAPI)).start()
    try:
        path = _config_file(tmp_path, config)
        result = run_cli("status", "--config", path, "--json", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        (node,) = report["nodes"]
        assert node["node_id"] == "node-status-test" and node["streams"] == []
        assert node["levels"][0]["tier"] == "hot-disk" and node["levels"][0]["capacity_bytes"] == 3 * 2**20
        assert report["coordinator"]["warm"]["capacity_bytes"] == 5 * 2**20
        table = run_cli("status", "--config", path, cwd=tmp_path)
        assert table.returncode == 0, table.stderr
        assert "hot-disk" in table.stdout and "0 B / 3.0 MiB (0%)" in table.stdout
        assert "(shared)  warm 0 B / 5.0 MiB" in table.stdout
    finally:
        cache.close()


def _frames(proc: subprocess.Popen, want: int, timeout_s: float) -> list[str]:
    frames: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while len(frames) < want and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("tierload status at"):
            frames.append(line)
    return frames


def test_status_during_a_job_shows_its_stream_and_watch_refreshes(bucket, tier_config, make_dataset, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=2048)
    config = tier_config()
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", window_blocks=4)
    dataset.set_epoch(0)
    samples = iter(dataset)
    # 20 samples: past the first progress report (every depth_blocks / 4 = 16 samples), which is
    # all that moves the cache's cursor when every read is a hot hit (no miss carries a position).
    for _ in range(20):
        next(samples)  # the epoch stays open: its stream is in the report
    path = _config_file(tmp_path, config)
    # The reader's position reaches the cache as a one-way notice (or with a miss), so a status
    # query may overtake it on a busy machine: ask again until the position shows, for a while.
    deadline = time.monotonic() + 60
    while True:
        result = run_cli("status", "--config", path, "--json", cwd=tmp_path, env={"RAY_ADDRESS": ""})
        assert result.returncode == 0, result.stderr
        (node,) = json.loads(result.stdout)["nodes"]
        (stream,) = node["streams"]
        if stream["cursor"] > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert stream["consume_len"] == 40 and 0 < stream["cursor"] <= 20 and stream["lead_blocks"] >= 0
    assert node["accesses"] >= 10 and node["cold_gets"] >= 10
    watch = subprocess.Popen([sys.executable, "-m", "tierload.cli.main", "status", "--config", path, "--watch",
                              "--interval", "0.2"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""})
    try:
        assert len(_frames(watch, 2, 120)) == 2
    finally:
        watch.terminate()
        watch.wait(30)


def test_status_ignores_the_endpoint_of_a_cache_that_ended_without_withdrawing_it(tmp_path):
    """A job's own Ray kills its cache at exit: the endpoint file stays, nothing listens on its socket."""
    import socket

    from tierload.wire.endpoint import publish_endpoint
    from tierload.wire.messages import Endpoint

    hot = tmp_path / "hot"
    hot.mkdir()
    address = str(tmp_path / "gone.sock")
    bound = socket.socket(socket.AF_UNIX)
    bound.bind(address)  # the path exists, but nothing accepts on it
    try:
        publish_endpoint(hot, Endpoint(address, b"k" * 32, "node-gone", (str(hot),), os.getpid()))
        result = run_cli("status", "--config", _config_file(tmp_path, {"hot": {"dir": str(hot)}}), cwd=tmp_path)
        assert result.returncode == 3 and "no tierload service" in result.stderr, result.stderr
    finally:
        bound.close()


def test_stop_without_a_cluster_says_there_is_nothing_to_stop(tmp_path):
    path = _config_file(tmp_path, {"hot": {"dir": str(tmp_path / "hot")}})
    result = run_cli("stop", "--config", path, cwd=tmp_path, env={"RAY_ADDRESS": ""})
    assert result.returncode == 0 and "nothing to stop" in result.stdout, result.stderr
