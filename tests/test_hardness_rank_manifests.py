"""Ranks that list the bucket at different moments (issue 26 item 1, case B61).

A real 2-rank gloo group (two spawned processes), each rank with its own hot tier and manifest
cache (two nodes). Rank 0 lists 20 objects; an object is added to the moto bucket; rank 1 lists 21.
Each rank then trains as under DDP: one all-reduce per batch. Correct is one agreed manifest on
both ranks (equal ``len()``, each sample once across ranks, plus the documented padding), or the
disagreement stopped at the start on both ranks with an error naming both listings. Never a
silent duplicate or a missing sample, never a rank waiting in a collective: the group's timeout
and the test's own bound turn a hang into a failure.

Real moto S3 over HTTP, a real local Ray (the ranks join it), real processes; nothing mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from helpers import put_indexed_objects

from tierload.config.loading import load_config
from tierload.deploy.runtime import stop_actors

RANK = r'''
import datetime, json, os, sys, time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

rank, work, url, config, options = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
dist.init_process_group("gloo", init_method=f"file://{work}/group", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=30))
record = {"rank": rank}
try:
    if rank == 1:  # list only once the test added an object after rank 0's listing
        deadline = time.monotonic() + 120
        while not os.path.exists(f"{work}/go") and time.monotonic() < deadline:
            time.sleep(0.05)
    from tierload import TieredDataset, collate

    dataset = TieredDataset(url, config, storage_options=options, layout="files", batch_size=2, seed=3)
    record["len"] = len(dataset)
    ids = []
    for samples, _labels in DataLoader(dataset, batch_size=2, collate_fn=collate):
        ids.extend(int(bytes(sample[:8]).decode()) for sample in samples)
        dist.all_reduce(torch.ones(1))  # a DDP step: every rank must take it
    record["ids"] = ids
except Exception as exc:  # recorded for the test to judge
    record["error"], record["message"] = type(exc).__name__, str(exc)
with open(f"{work}/record.{rank}.json", "w") as out:
    json.dump(record, out)
sys.stdout.flush()
os._exit(0)
'''


def rank_config(root: Path) -> dict:
    return {"hot": {"dir": str(root / "hot"), "capacity_bytes": "8MiB"}, "warm": {"url": None, "capacity_bytes": 0},
            "manifest": {"cache_dir": str(root / "manifests"), "pack_target_bytes": 0}}


@pytest.mark.parametrize("state", ["listed later", "cached earlier"])
def test_b61_ranks_that_list_at_different_moments_agree_or_stop_both(s3, ray_session, bucket, tmp_path,
                                                                     make_dataset, state):
    """``listed later``: rank 1 lists after the object was added, while rank 0 trains on its listing.
    ``cached earlier``: rank 1's node holds a listing cached before the object was added (its node
    cache still running from that job); rank 0's cache is empty and lists now, both at once."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 20, size=64)
    url = f"s3://{name}/ds"
    script = tmp_path / "rank.py"
    script.write_text(RANK, encoding="utf-8")
    configs = []
    for rank in range(2):
        data = rank_config(tmp_path / f"node{rank}")
        configs.append(load_config(data))
        (tmp_path / f"node{rank}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    if state == "cached earlier":
        earlier = make_dataset(url, configs[1], layout="files", batch_size=2, seed=3)  # an earlier job on node 1
        assert earlier.manifest.num_samples == 20
        fs.pipe_file(f"{name}/ds/0/obj-000020.bin", b"00000020" + bytes(56))
        (tmp_path / "go").touch()
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address, "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path), url,
                               str(tmp_path / f"node{rank}.yaml"), json.dumps(s3.storage_options)],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in range(2)]
    try:
        if state == "listed later":
            listed = tmp_path / "node0" / "manifests"
            deadline = time.monotonic() + 120
            while not list(listed.glob("*.arrow")) and time.monotonic() < deadline and ranks[0].poll() is None:
                time.sleep(0.05)
            assert list(listed.glob("*.arrow")), "rank 0 never listed the prefix"
            fs.pipe_file(f"{name}/ds/0/obj-000020.bin", b"00000020" + bytes(56))  # after rank 0's listing
            (tmp_path / "go").touch()
        outputs = [process.communicate(timeout=240)[0] for process in ranks]
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
        for config in configs:
            stop_actors(config)
    records = []
    for rank in range(2):
        path = tmp_path / f"record.{rank}.json"
        assert path.exists(), f"rank {rank} recorded nothing:\n{outputs[rank][-3000:]}"
        records.append(json.loads(path.read_text()))
    print(json.dumps([{k: v for k, v in r.items() if k != "ids"} for r in records], indent=1))
    errors = [record.get("error") for record in records]
    if any(errors):
        # Stopped: on both ranks, at the start, with the typed error naming both listings.
        assert errors == ["ManifestMismatchError"] * 2, records
        for record in records:
            assert "len" not in record  # before any rank trained
            assert "20 samples" in record["message"] and "21 samples" in record["message"]
            assert "rank 0" in record["message"] and "rank 1" in record["message"]
        return
    # Agreed: one manifest, equal length, every sample of it once across ranks (plus padding).
    lengths = [record["len"] for record in records]
    assert lengths[0] == lengths[1], f"len() differs across ranks: {lengths}"
    seen = Counter(i for record in records for i in record["ids"])
    count = len(seen)
    assert count in (20, 21) and set(seen) == set(range(count))
    assert sum(seen.values()) == 2 * lengths[0] and sum(n - 1 for n in seen.values()) == 2 * lengths[0] - count
