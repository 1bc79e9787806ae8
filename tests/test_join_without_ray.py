"""A training process joins a running node cache without importing Ray (issue 25, item 1).

One job in its own process owns the node cache in a local Ray of its own (the module-scoped
``owner`` fixture of tests/test_hardness_service_join.py); another process builds a
``TieredDataset`` with the same tiers, reads an epoch through that cache, and reports whether
``ray`` was ever imported in it.
"""

from __future__ import annotations

import json
import subprocess
import sys

from test_hardness_service_join import owner  # noqa: F401 - the module-scoped owner job, shared

_JOINER = """
import json, sys
from tierload.loader.dataset import TieredDataset
spec = json.loads(sys.argv[1])
dataset = TieredDataset(spec["url"], spec["config"], storage_options=spec["storage_options"], layout="files",
                        batch_size=1)
samples = sum(1 for _ in dataset)
print(json.dumps({"samples": samples, "ray_imported": "ray" in sys.modules,
                  "cache_pid": dataset._endpoint.pid}))
"""


def test_a_job_joins_a_running_node_cache_without_importing_ray(owner):  # noqa: F811
    spec, ready, _config_path, env = owner
    joined_spec = {**spec, "url": spec["url2"]}  # a dataset the owner never listed: the joiner's helper lists it
    done = subprocess.run([sys.executable, "-c", _JOINER, json.dumps(joined_spec)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cache_pid"] == ready["cache_pid"]  # the owner's node cache
    assert result["samples"] == 14
    assert result["ray_imported"] is False
