"""tierload's local Ray starts on a loaded machine: a node that timed out during start-up because
its dashboard agent was slow (ray-project/ray#65983) is ended and started once more.

The fault is real: the first dashboard agent sleeps past the raylet's 15 s wait for its port file
(tests/slow_agent.py), the raylet exits, and ``ray.init`` raises after its own 30 s. The start runs in
a process of its own, which lists what runs under it once it is connected.
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

TESTS = Path(__file__).parent

_START = r"""
import json, logging, sys
import psutil, ray
from tierload.config.loading import load_config
from tierload.deploy.runtime import ensure_ray

warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("tierload").addHandler(Keep(level=logging.WARNING))
ensure_ray(load_config({"ray": {"num_cpus": 1, "object_store_memory_bytes": 100 * 2**20}}, environ={}),
           log_to_driver=False)
names = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
print(json.dumps({"connected": ray.is_initialized(), "warnings": warnings,
                  "gcs_servers": sum("gcs_server" in name for name in names),
                  "raylets": sum("/raylet " in name for name in names)}))
ray.shutdown()
"""


def test_a_node_whose_agent_starts_too_slowly_is_ended_and_started_again(tmp_path):
    flag = tmp_path / "slow-agent.pid"
    env = {**os.environ, "TIERLOAD_TEST_SLOW_AGENT_FLAG": str(flag), "TIERLOAD_METRICS__ENABLED": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", _START], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert flag.exists(), "the fault was not injected: no dashboard agent started slowly"
    assert report["connected"]
    assert any("timed out during start-up" in line for line in report["warnings"]), report["warnings"]
    # The failed try's GCS was ended: one node runs, the second try's.
    assert report["gcs_servers"] == 1 and report["raylets"] == 1, report
    # The slow agent, orphaned when its raylet exited, ends by itself once it wakes.
    slow_agent = int(flag.read_text())
    deadline = time.monotonic() + 60
    while psutil.pid_exists(slow_agent) and time.monotonic() < deadline:
        try:
            if psutil.Process(slow_agent).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.Error:
            break
        time.sleep(0.5)
    alive = psutil.pid_exists(slow_agent) and psutil.Process(slow_agent).status() != psutil.STATUS_ZOMBIE
    assert not alive, f"the failed try's dashboard agent {slow_agent} still runs"


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
