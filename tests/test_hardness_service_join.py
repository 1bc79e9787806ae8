"""Joining a running node cache from other processes (issue 26, items 10 and 7).

One job in its own process starts a local Ray of its own (loopback only, as tierload starts it)
and keeps its node cache running. Then, from other processes:

- item 10: ``tierload status --address 127.0.0.1:<its GCS port>`` and ``tierload policy set``
  (with ``--address``, and without: found through the node cache running here) answer; a dead
  address fails fast with a ``ServiceError`` (exit code 5), from the CLI and from a dataset.
- item 10, every join: ``status``, ``stop``, ``warm --address``, ``TieredDataset(address=...)`` and
  ``RAY_ADDRESS`` from a second process reach the running cache by its loopback address, and each
  names a dead address in a typed failure (the subprocess timeouts turn a hang into a failure);
  ``stop --address`` ends tierload's actors and leaves the Ray it joined running (last in this file).
- item 7: a job that joins the cache (no Ray of its own) has its per-rank stall metrics on the
  owner's Ray Prometheus endpoint, as a job with Ray has them (tests/test_metrics.py).
- issue 25, item 1: a training process with the same tiers joins the running cache without
  importing Ray (here, not in a module of its own, so that it joins this module's owner job
  instead of starting a second one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import put_indexed_objects
from store_servers import refused_port

JOB = Path(__file__).resolve().parent / "hardness_ray_job.py"
CLI = [sys.executable, "-m", "tierload.cli.main"]


def _env(ray_tmp: str) -> dict[str, str]:
    # Metrics on, as by default (the tests' default is off, tests/conftest.py): item 7's rank metrics.
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "TIERLOAD_METRICS__ENABLED": "true"}
    env.pop("RAY_ADDRESS", None)
    return env


@pytest.fixture(scope="module")
def owner(s3, tmp_path_factory):
    """A job with its own local Ray holding its node cache: ``(spec, ready event, config path, env)``."""
    root = tmp_path_factory.mktemp("owner")
    ray_tmp = tempfile.mkdtemp(prefix="tlj")  # Ray's socket paths must stay under 107 bytes
    name = f"join-{os.getpid()}"
    fs = s3.create_bucket(name)
    put_indexed_objects(fs, f"{name}/a", 10, size=2048)
    put_indexed_objects(fs, f"{name}/b", 14, size=2048)
    put_indexed_objects(fs, f"{name}/c", 14, size=2048)  # listed by no one before the test that reads it
    config = {"hot": {"dir": str(root / "hot"), "capacity_bytes": "16MiB"},
              "warm": {"url": str(root / "warm"), "capacity_bytes": "16MiB"},  # a coordinator: `warm --address`
              "manifest": {"cache_dir": str(root / "manifests"), "pack_target_bytes": 0},
              "ray": {"num_cpus": 1, "object_store_memory_bytes": 100 * 2**20},
              "metrics": {"export_interval_s": 0.5}}
    config_path = root / "config.yaml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    spec = {"url": f"s3://{name}/a", "url2": f"s3://{name}/b", "url3": f"s3://{name}/c",
            "storage_options": s3.storage_options,
            "config": config, "exit_when": str(root / "exit")}
    env = _env(ray_tmp)
    job = subprocess.Popen([sys.executable, str(JOB), "owner", json.dumps(spec)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, env=env)
    assert job.stdout is not None
    ready = None
    for line in job.stdout:
        if line.startswith("{") and json.loads(line)["event"] == "ready":
            ready = json.loads(line)
            break
    assert ready is not None, "the owner job ended before its epoch"
    assert ready["gcs"].startswith("127.0.0.1:")
    yield spec, ready, str(config_path), env
    Path(spec["exit_when"]).touch()
    try:
        job.wait(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _cli(args: list[str], env: dict[str, str], timeout_s: float = 180) -> subprocess.CompletedProcess:
    """Run the CLI; a join that hangs fails the test (TimeoutExpired) instead of waiting forever."""
    return subprocess.run(CLI + args, capture_output=True, text=True, env=env, timeout=timeout_s)


@pytest.fixture
def refusing_address():
    """An address that refuses connections for the whole test (:func:`store_servers.refused_port`)."""
    with refused_port() as port:
        yield f"127.0.0.1:{port}"


def test_status_joins_a_loopback_ray_by_its_address(owner):
    spec, ready, config_path, env = owner
    done = _cli(["status", "--address", ready["gcs"], "--config", config_path, "--json"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert len(report["nodes"]) == 1 and "error" not in report["nodes"][0], report["nodes"]
    assert report["nodes"][0]["accesses"] >= 10


def test_policy_set_reaches_the_service_by_address_and_through_the_cache_running_here(owner):
    spec, ready, config_path, env = owner
    # FILE is the deployment's own config: its policy is the running one (a joiner stays compatible).
    by_address = _cli(["policy", "set", config_path, "--address", ready["gcs"]], env)
    assert by_address.returncode == 0, by_address.stderr[-3000:]
    assert "1 node cache(s)" in by_address.stdout, by_address.stdout
    found_here = _cli(["policy", "set", config_path], env)  # no --address, no RAY_ADDRESS
    assert found_here.returncode == 0, found_here.stderr[-3000:]
    assert "1 node cache(s)" in found_here.stdout, found_here.stdout


def test_a_dead_address_fails_fast_with_a_service_error(owner, tmp_path, refusing_address):
    spec, ready, config_path, env = owner
    dead = refusing_address
    done = _cli(["policy", "set", config_path, "--address", dead], env, timeout_s=120)
    assert done.returncode == 5, (done.returncode, done.stderr[-3000:])  # ServiceError's exit code
    assert dead in done.stderr and "no Ray cluster answers" in done.stderr, done.stderr
    # A dataset told to join it: the same typed error, not a wait for a GCS that never comes.
    other = {**spec["config"], "hot": {**spec["config"]["hot"], "dir": str(tmp_path / "hot")}}
    script = ("import json, sys\nfrom tierload.loader.dataset import TieredDataset\n"
              "from tierload.errors import ServiceError\n"
              "spec = json.loads(sys.argv[1])\ntry:\n"
              "    TieredDataset(spec['url'], spec['config'], storage_options=spec['storage_options'], layout='files',"
              " address=spec['address'])\nexcept ServiceError as exc:\n    print('ServiceError', exc)\n")
    joined = subprocess.run([sys.executable, "-c", script, json.dumps({**spec, "config": other, "address": dead})],
                            capture_output=True, text=True, env=env, timeout=120)
    assert joined.stdout.startswith("ServiceError") and dead in joined.stdout, (joined.stdout, joined.stderr[-3000:])


def _ray_series(port: int) -> list[tuple[str, dict, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith("ray_tierload_")]


def test_a_joined_jobs_rank_metrics_reach_the_owners_prometheus_endpoint(owner):
    spec, ready, config_path, env = owner
    joined_spec = {**spec, "url": spec["url2"]}  # its own dataset: its own `dataset` label
    done = subprocess.run([sys.executable, str(JOB), "joined", json.dumps(joined_spec)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert result["ray"] is False and result["cache_pid"] == ready["cache_pid"], result  # joined, without Ray
    assert result["samples"] == 14
    wanted = {"ray_tierload_stall_seconds_total": result["stall"]["stall_s"],
              "ray_tierload_loop_seconds_total": result["stall"]["seconds"],
              "ray_tierload_samples_total": 14}
    deadline, found = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        found = {name: value for name, labels, value in _ray_series(ready["metrics_port"])
                 if name in wanted and labels.get("dataset") == result["dataset_id"] and labels.get("rank") == "0"}
        if len(found) == len(wanted):
            break
        time.sleep(1)
    assert set(found) == set(wanted), f"the joined job's rank metrics are not on the owner's endpoint: {found}"
    for name, value in wanted.items():
        assert found[name] == pytest.approx(value, rel=1e-6, abs=1e-6), name


JOIN = """
import json, sys
import ray
from tierload.loader.dataset import TieredDataset
from tierload.errors import ServiceError

spec = json.loads(sys.argv[1])
try:
    dataset = TieredDataset(spec["url"], spec["config"], storage_options=spec["storage_options"], layout="files",
                            **({"address": spec["address"]} if "address" in spec else {}))
    samples = sum(1 for _ in dataset)
    # The node the cache runs on (a Ray node id), and whether Ray came into this process: a process without
    # Ray has tierload's service host join the cluster (tierload.deploy.host).
    print("RESULT " + json.dumps({"samples": samples, "cache_pid": dataset._endpoint.pid,
                                  "node": dataset._endpoint.node_id, "ray_here": ray.is_initialized()}))
except ServiceError as exc:
    print("RESULT " + json.dumps({"error": "ServiceError", "message": str(exc)}))
"""


def _join(spec: dict, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", JOIN, json.dumps(spec)], capture_output=True, text=True, env=env,
                          timeout=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def _elsewhere(spec: dict, root: Path) -> dict:
    """``spec`` with a hot tier of its own: no node cache runs for it here, so the join goes through Ray."""
    return {**spec, "config": {**spec["config"], "hot": {**spec["config"]["hot"], "dir": str(root / "hot")},
                               "warm": {"url": None, "capacity_bytes": 0}}}


def test_a_second_process_joins_by_address_and_by_ray_address(owner, tmp_path):
    spec, ready, config_path, env = owner
    # The owner's own configuration: its node cache is found here, through its channel.
    here = _join({**spec, "address": ready["gcs"]}, env)
    assert here == {"samples": 10, "cache_pid": ready["cache_pid"], "node": ready["node"], "ray_here": False}, here
    # Another hot tier: the process (its service host) joins the owner's loopback Ray at its address, which
    # starts that tier's node cache on the owner's node (the path that hung on "Failed to connect to GCS at
    # 192.0.2.2"); a Ray of its own would be another node.
    by_argument = _join({**_elsewhere(spec, tmp_path / "argument"), "address": ready["gcs"]}, env)
    assert by_argument["samples"] == 10 and by_argument["node"] == ready["node"], by_argument
    assert by_argument["cache_pid"] != ready["cache_pid"] and not by_argument["ray_here"], by_argument
    by_environment = _join(_elsewhere(spec, tmp_path / "environment"), {**env, "RAY_ADDRESS": ready["gcs"]})
    assert by_environment["samples"] == 10 and by_environment["node"] == ready["node"], by_environment


def test_warm_by_address_stages_through_the_services_coordinator(owner):
    spec, ready, config_path, env = owner
    endpoint = spec["storage_options"]["client_kwargs"]["endpoint_url"]
    done = _cli(["warm", spec["url"], "--config", config_path, "--address", ready["gcs"], "--endpoint-url", endpoint],
                {**env, "AWS_ACCESS_KEY_ID": spec["storage_options"]["key"],
                 "AWS_SECRET_ACCESS_KEY": spec["storage_options"]["secret"]})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"through the service at {ready['gcs']}" in done.stdout, done.stdout


def test_every_join_names_a_dead_address_in_a_typed_failure(owner, tmp_path, refusing_address):
    spec, ready, config_path, env = owner
    dead = refusing_address
    status = _cli(["status", "--address", dead, "--config", config_path], env, timeout_s=120)
    assert status.returncode == 3 and f"no Ray cluster answers at '{dead}'" in status.stderr, status.stderr
    status_env = _cli(["status", "--config", config_path], {**env, "RAY_ADDRESS": dead}, timeout_s=120)
    assert status_env.returncode == 3 and dead in status_env.stderr, status_env.stderr
    stop = _cli(["stop", "--address", dead, "--config", config_path], env, timeout_s=120)
    assert stop.returncode == 5 and dead in stop.stderr and "nothing was stopped" in stop.stderr, stop.stderr
    credentials = {"AWS_ACCESS_KEY_ID": spec["storage_options"]["key"],
                   "AWS_SECRET_ACCESS_KEY": spec["storage_options"]["secret"]}
    endpoint = spec["storage_options"]["client_kwargs"]["endpoint_url"]
    warm = _cli(["warm", spec["url"], "--config", config_path, "--address", dead, "--endpoint-url", endpoint],
                {**env, **credentials}, timeout_s=120)
    assert warm.returncode == 5 and dead in warm.stderr and "nothing was staged" in warm.stderr, warm.stderr
    joined = _join(_elsewhere(spec, tmp_path), {**env, "RAY_ADDRESS": dead})
    assert joined["error"] == "ServiceError" and dead in joined["message"], joined


_JOINER_WITHOUT_RAY = """
import json, sys
from tierload.loader.dataset import TieredDataset
spec = json.loads(sys.argv[1])
dataset = TieredDataset(spec["url"], spec["config"], storage_options=spec["storage_options"], layout="files",
                        batch_size=1)
samples = sum(1 for _ in dataset)
print(json.dumps({"samples": samples, "ray_imported": "ray" in sys.modules,
                  "arrow_imported": "pyarrow" in sys.modules, "cache_pid": dataset._endpoint.pid}))
"""


def test_a_job_joins_a_running_node_cache_without_importing_ray(owner):
    """Issue 25, item 1: another process builds a ``TieredDataset`` with the owner's tiers, reads an
    epoch through its cache, and never imports ``ray``; nor ``pyarrow``: its forked helper lists the
    dataset and writes the manifest, and it maps the file through its column index with numpy."""
    spec, ready, _config_path, env = owner
    joined_spec = {**spec, "url": spec["url3"]}  # a dataset no one listed yet: the joiner's helper lists it
    done = subprocess.run([sys.executable, "-c", _JOINER_WITHOUT_RAY, json.dumps(joined_spec)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cache_pid"] == ready["cache_pid"]  # the owner's node cache
    assert result["samples"] == 14
    assert result["ray_imported"] is False
    assert result["arrow_imported"] is False, result


def test_stop_by_address_ends_tierloads_actors_and_leaves_the_ray_it_joined(owner):
    """Last in this file: the owner's node cache ends here."""
    from tierload.deploy.service_probe import ray_cluster_answers

    spec, ready, config_path, env = owner
    stop = _cli(["stop", "--address", ready["gcs"], "--config", config_path], env)
    assert stop.returncode == 0 and "stopped " in stop.stdout, (stop.stdout, stop.stderr[-3000:])
    assert int(stop.stdout.split("stopped ")[1].split()[0]) >= 1, stop.stdout
    assert ray_cluster_answers(ready["gcs"])  # the job's Ray still runs
    after = _cli(["status", "--address", ready["gcs"], "--config", config_path, "--json"], env)
    assert after.returncode == 3, (after.returncode, after.stdout, after.stderr[-3000:])
