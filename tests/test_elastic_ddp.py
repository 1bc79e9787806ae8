"""Elastic resumption under real DDP (issue 22, item 2): torchrun with 2 gloo ranks and 2 workers each
stops mid-epoch, rank 0 alone saves its StatefulDataLoader state; torchrun with 3 ranks and 1 worker
each loads that one state on every rank and finishes the epoch. Every sample id of the epoch is
trained on exactly once, plus the padding of the 3-rank split.

The ranks are real processes started by torchrun (examples/train_ddp_elastic.py); they join this
test's local Ray (RAY_ADDRESS) and share one node cache, which this process owns. moto S3 over
HTTP; nothing mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed (pip install 'tierload[test]')")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from demo_data import write_npy_dataset  # noqa: E402

COUNT = 46


def test_torchrun_two_ranks_resume_on_three_from_rank_zeros_state(s3, ray_session, bucket, tier_config,
                                                                  make_dataset, tmp_path):
    name, fs = bucket
    url = f"s3://{name}/elastic"
    write_npy_dataset(fs, url.removeprefix("s3://"), COUNT, dim=4, files=2)
    config = tier_config(hot="1MiB", warm=None, manifest={"block_bytes": 64})  # 4 rows per block
    owner = make_dataset(url, config)  # lists once and owns the node cache the ranks join
    assert owner.manifest.num_samples == COUNT
    config_path = tmp_path / "tierload.yaml"
    config_path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    checkpoint = tmp_path / "ckpt.pt"
    runs = [(2, 2, ["--stop-after", "3", "--save", str(checkpoint)], "first"),
            (3, 1, ["--resume", str(checkpoint)], "second")]
    records = {}
    for nproc, workers, extra, tag in runs:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                   str(ROOT / "examples" / "train_ddp_elastic.py"), "--url", url, "--config", str(config_path),
                   "--storage-options", json.dumps(s3.storage_options), "--batch-size", "4",
                   "--num-workers", str(workers), "--timeout-s", "90", "--record", str(tmp_path / tag), *extra]
        done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
        print(f"\n$ torchrun --nproc_per_node={nproc} examples/train_ddp_elastic.py --num-workers {workers} "
              f"{' '.join(extra)}\n{done.stdout.strip()}")
        records[tag] = [json.loads((tmp_path / f"{tag}.{rank}.json").read_text()) for rank in range(nproc)]
    first, second = records["first"], records["second"]
    assert [r["batches"] for r in first] == [3, 3] and all(len(r["ids"]) == 12 for r in first)
    # 46 - 24 = 22 left; 3 ranks take ceil(22 / 3) = 8 each (2 batches of 4): 24, two of them padding
    assert [r["batches"] for r in second] == [2, 2, 2] and all(len(r["ids"]) == 8 for r in second)
    seen = Counter(i for record in first + second for i in record["ids"])
    assert set(seen) == set(range(COUNT))
    assert sum(seen.values()) == COUNT + 2 and max(seen.values()) == 2
    # nothing of the first run comes again: the padding repeats samples of the remainder
    assert not {i for r in first for i in r["ids"]} & {i for r in second for i in r["ids"]}
