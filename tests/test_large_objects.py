"""Case B24: an object larger than Ray's object store (slow; ``pytest -m slow tests/test_large_objects.py``).

Blocks never travel through Ray's object store on a node: the node cache writes them to its hot
tier's files, which consumers read directly, or sends a block the hot tier does not hold as
frames over its own Unix-socket channel (tierload/wire/channel.py). So a block larger than the
store goes through like any other. Checked in a child process that starts tierload's own local
Ray with the smallest store Ray allows (75 MiB) and reads a 100 MiB object of random bytes, once
through a hot tier that holds it and once through one too small for it (so it crosses the channel).

Across nodes it is different: a peer's ``read_block`` answer is a Ray actor return value, so a
block served by a peer passes whole through the object store. A block larger than
``hot.peer_max_store_fraction`` of the node's store is therefore never asked of a peer (warm or
cold serve it): tests/test_multinode.py, ``peer_limit`` scenario (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIG = 100 * 2**20
STORE = 75 * 2**20  # ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES

_CHILD = textwrap.dedent("""
    import hashlib, json, os, re, sys
    import ray
    from torch.utils.data import DataLoader
    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset
    from tierload_tools.s3local import LocalS3

    work, big_size, store = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with LocalS3() as s3:
        fs = s3.create_bucket("large")
        big = os.urandom(big_size)
        fs.pipe_file("large/ds/big.bin", big)
        small = {f"large/ds/small-{i}.bin": os.urandom(1000 + i) for i in range(4)}
        fs.pipe(small)
        fs.invalidate_cache()
        expected = sorted([hashlib.sha256(big).hexdigest()] + [hashlib.sha256(b).hexdigest() for b in small.values()])
        result = {"expected": expected, "runs": {}}
        for label, hot_bytes in (("hot holds it", 2 * big_size), ("hot too small", big_size // 4)):
            config = {"hot": {"dir": f"{work}/{label.replace(' ', '-')}", "capacity_bytes": hot_bytes},
                      "warm": {"url": None}, "ray": {"num_cpus": 1, "object_store_memory_bytes": store},
                      "manifest": {"cache_dir": f"{work}/manifests", "pack_target_bytes": 0}}
            dataset = TieredDataset("s3://large/ds", config, layout="files", storage_options=s3.storage_options)
            epochs = []
            for epoch in (0, 1):
                dataset.set_epoch(epoch)
                loader = DataLoader(dataset, batch_size=1, collate_fn=lambda batch: batch)
                epochs.append(sorted(hashlib.sha256(bytes(s)).hexdigest() for batch in loader for s, _ in batch))
            result["runs"][label] = {"epochs": epochs, "stats": [dataset.epoch_stats(e) for e in (0, 1)]}
            stop_actors(dataset.config)
        result["store_capacity"] = ray.cluster_resources().get("object_store_memory")
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.slow
def test_b24_an_object_larger_than_the_object_store_is_read_exactly(tmp_path):
    """Case B24: a 100 MiB object with a 75 MiB Ray object store, through a hot tier that holds it
    and through one that cannot: every epoch gets identical bytes."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    root = str(Path(__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(BIG), str(STORE)], capture_output=True,
                          text=True, timeout=540, env=env, cwd=root)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-4000:]
    result = json.loads(line[len("RESULT "):])
    assert result["store_capacity"] <= STORE * 1.01  # the store really is smaller than the object
    for label, run in result["runs"].items():
        for epoch in run["epochs"]:
            assert epoch == result["expected"], label  # each sample once, identical bytes
    assert result["runs"]["hot too small"]["stats"][1]["wire_raw_bytes"] >= BIG  # it crossed the channel
    assert result["runs"]["hot holds it"]["stats"][1].get("cold_gets", 0) == 0  # and the hot tier held it


def test_the_node_cache_knows_its_object_store_size(ray_session):
    """Case B24 across nodes: the peer limit is a share of the node's store, read from Ray."""
    from tierload.deploy.actors import _object_store_bytes

    node_id = ray_session.get_runtime_context().get_node_id()
    assert _object_store_bytes(node_id) == pytest.approx(200 * 2**20, rel=0.02)  # the session's store
    assert _object_store_bytes("no-such-node") is None
