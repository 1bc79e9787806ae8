"""tierload's local Ray starts on a loaded machine: a node that timed out during start-up because
its dashboard agent was slow (ray-project/ray#65983) is ended and started once more.

The fault is real: the first dashboard agent sleeps past the raylet's 15 s wait for its port file
(tests/slow_agent.py), the raylet exits, and ``ray.init`` raises after its own 30 s. It hits a real
training job (tests/tierload_job.py, moto's S3 over HTTP), whose service host starts the local Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import put_indexed_objects

TESTS = Path(__file__).parent
OBJECTS, SIZE = 20, 256


def _ray_servers(pid: int) -> dict[str, int]:
    """How many GCS servers and raylets run under process ``pid``."""
    names = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            names.append(" ".join(child.cmdline()))
        except psutil.Error:
            continue
    return {"gcs_server": sum("gcs_server" in name for name in names),
            "raylet": sum("/raylet " in name for name in names)}


def test_a_job_whose_ray_agent_starts_too_slowly_starts_ray_again_and_reads_every_sample_once(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=SIZE)
    flag, result, exit_when = tmp_path / "slow-agent.pid", tmp_path / "result.json", tmp_path / "exit"
    config = {"hot": {"dir": str(tmp_path / "hot"), "capacity_bytes": "16MiB"}, "warm": {"url": None},
              "manifest": {"cache_dir": str(tmp_path / "manifests"), "pack_target_bytes": 0},
              "ray": {"num_cpus": 1, "object_store_memory_bytes": 100 * 2**20}}
    spec = {"url": f"s3://{name}/ds", "storage_options": s3.storage_options, "config": config, "epochs": 1,
            "seed": 0, "num_workers": 0, "delay_s": 0.0, "sample_size": SIZE, "result": str(result),
            "exit_when": str(exit_when)}
    env = {**os.environ, "TIERLOAD_TEST_SLOW_AGENT_FLAG": str(flag), "TIERLOAD_METRICS__ENABLED": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    log = tmp_path / "job.log"
    with open(log, "w") as stderr:
        job = subprocess.Popen([sys.executable, str(TESTS / "tierload_job.py"), json.dumps(spec)],
                               stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
        events = []
        for line in job.stdout:
            if line.startswith("{"):
                events.append(json.loads(line)["event"])
                if events[-1] == "done":
                    break
        assert events[-1:] == ["done"], log.read_text()[-4000:]
        # The failed try's GCS was ended: one node runs under the job, the second try's.
        assert _ray_servers(job.pid) == {"gcs_server": 1, "raylet": 1}
        exit_when.touch()
        assert job.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert flag.exists(), "the fault was not injected: no dashboard agent started slowly"
    assert "timed out during start-up" in log.read_text(), log.read_text()[-4000:]
    outcome = json.loads(result.read_text())
    assert outcome["ray"] and not outcome["ray_imported"]  # Ray ran in the job's service host
    assert outcome["wrong_bytes"] == 0 and sorted(outcome["epochs"][0]["seen"]) == list(range(OBJECTS))
    # The slow agent, orphaned when its raylet exited, ends by itself once it wakes.
    slow_agent = int(flag.read_text())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if psutil.Process(slow_agent).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.Error:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"the failed try's dashboard agent {slow_agent} still runs")


def test_the_prompt_registration_lookup_hands_a_registered_node_to_rays_own_and_says_when_none_came(ray_session):
    """Against the session's real GCS: a registered node is found and Ray's own lookup answers for it; a
    node the GCS never lists is, after the wait, the RuntimeError Ray's own lookup raises for a missing
    node (``ray.init`` then says its node timed out), and Ray's lookup, which would wait on, is not asked."""
    import ray

    from tierload.deploy.local_ray import _registered_promptly

    gcs_address = ray.get_runtime_context().gcs_address
    registered = ray.get_runtime_context().get_node_id()
    asked = []

    def rays_own(address, node_id):
        asked.append(node_id)
        return {"node_id": node_id}

    assert _registered_promptly(rays_own, wait_s=1.0)(gcs_address, registered) == {"node_id": registered}
    never = "ab" * 28
    with pytest.raises(RuntimeError, match=f"node {never} did not register"):
        _registered_promptly(rays_own, wait_s=1.0)(gcs_address, never)
    assert asked == [registered]
