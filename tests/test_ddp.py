"""DDP under torchrun (gloo on CPU, 2 and 3 processes): every rank yields the same number of batches
whatever the dataset size, so the gradient all-reduce never waits for a rank that ran out (B03), and
across ranks and workers every sample appears exactly once per epoch, plus the documented padding.

The ranks are real processes started by torchrun; they join this test's local Ray (RAY_ADDRESS) and
share one node cache, which this process owns so it outlives them. moto S3 over HTTP; nothing mocked.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from demo_data import write_npy_dataset  # noqa: E402


@pytest.mark.parametrize("nproc, count, drop_last, workers", [(2, 23, False, 2), (3, 23, True, 1)])
def test_torchrun_ranks_yield_equal_batches_and_every_sample_once(s3, ray_session, bucket, shared_configs,
                                                                  module_dataset, tmp_path, nproc, count, drop_last,
                                                                  workers):
    name, fs = bucket
    url = f"s3://{name}/ddp"
    write_npy_dataset(fs, url.removeprefix("s3://"), count, dim=4, files=2)
    config = shared_configs(block_bytes=64, hot="1MiB", warm=None)  # 4 rows per block
    # Lists once; the node cache the ranks join is this module's, so it outlives them.
    owner = module_dataset(url, config)
    assert owner.manifest.layout == "npy" and owner.manifest.num_samples == count
    config_path = tmp_path / "tierload.yaml"
    config_path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               str(ROOT / "examples" / "train_ddp.py"), "--url", url, "--config", str(config_path),
               "--storage-options", json.dumps(s3.storage_options), "--batch-size", "4",
               "--num-workers", str(workers), "--epochs", "2", "--timeout-s", "90",
               "--record", str(tmp_path / "record"), *(["--drop-last"] if drop_last else [])]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    print(f"\n$ torchrun --nproc_per_node={nproc} examples/train_ddp.py ... (N={count}, drop_last={drop_last})")
    print(done.stdout.strip())
    records = [json.loads((tmp_path / f"record.{rank}.json").read_text()) for rank in range(nproc)]
    per_rank = count // nproc if drop_last else math.ceil(count / nproc)
    batches = math.ceil(per_rank / 4)
    orders = []
    for epoch in range(2):
        rows = [record["epochs"][epoch] for record in records]
        assert [row["batches"] for row in rows] == [batches] * nproc  # equal on every rank
        assert all(record["len_loader"] == batches for record in records)  # len(loader) is exact
        assert all(len(row["ids"]) == per_rank for row in rows)
        seen = Counter(i for row in rows for i in row["ids"])
        if drop_last:
            assert sum(seen.values()) == len(seen) == count - count % nproc  # once each, remainder dropped
        else:
            assert set(seen) == set(range(count))  # all of them, once, plus the padding
            repeats = sum(v - 1 for v in seen.values())
            assert sum(seen.values()) == per_rank * nproc and repeats == per_rank * nproc - count
        print(f"epoch {epoch}: batches per rank {[row['batches'] for row in rows]}, samples per rank "
              f"{[len(row['ids']) for row in rows]}, distinct {len(seen)}, "
              f"repeated {sum(v - 1 for v in seen.values())}")
        orders.append([i for row in rows for i in row["ids"]])
    assert orders[0] != orders[1]


@pytest.fixture(scope="module")
def shared_configs(module_tier_config):
    """``config(block_bytes, hot=, warm=)``: the tiers of a deployment the tests of this module share for one
    block size and tier sizes, each reading its own fresh rows: what they assert (ids, batch counts,
    len(loader)) is per dataset."""
    def config(block_bytes=None, hot="64MiB", warm="64MiB"):
        return module_tier_config(hot, warm, manifest={"block_bytes": block_bytes} if block_bytes else {})
    return config


@pytest.fixture
def rows_dataset(bucket, shared_configs, module_dataset):
    """``make(count, files, **kwargs)``: .npy rows whose first value is the row id."""
    name, fs = bucket

    def make(count, files, block_rows=None, **kwargs):
        prefix = f"{name}/rows{count}x{files}"
        write_npy_dataset(fs, prefix, count, dim=2, files=files)
        block_bytes = block_rows * 8 if block_rows else None  # rows of two float32 values
        return module_dataset(f"s3://{prefix}", shared_configs(block_bytes), **kwargs)
    return make


def ids_and_batches(dataset, **loader_kwargs):
    from torch.utils.data import DataLoader

    from tierload import collate

    loader = DataLoader(dataset, collate_fn=collate, **loader_kwargs)
    ids, batches = [], 0
    for rows, _labels in loader:
        ids.extend(int(v) for v in rows[:, 0])
        batches += 1
    return ids, batches, len(loader)


def test_global_batching_across_four_workers_loses_no_batch(rows_dataset, caplog):
    """B01: 1,000 samples in 10 objects, 4 workers, batch 64, drop_last: floor(1000/64) = 15 batches, and
    len(loader) says so; 120 samples give 1 batch (not 0); fewer samples than a batch warn."""
    dataset = rows_dataset(1000, 10, batch_size=64)
    ids, batches, length = ids_and_batches(dataset, batch_size=64, num_workers=4, drop_last=True)
    assert batches == length == 15 and len(set(ids)) == len(ids) == 15 * 64
    edge = rows_dataset(120, 2, batch_size=64)
    ids, batches, length = ids_and_batches(edge, batch_size=64, num_workers=4, drop_last=True)
    assert batches == length == 1 and len(set(ids)) == 64
    tiny = rows_dataset(30, 1, batch_size=64)
    with caplog.at_level("WARNING", logger="tierload.loader.dataset"):
        ids, batches, length = ids_and_batches(tiny, batch_size=64, num_workers=0, drop_last=True)
    assert batches == length == 0 and any("fewer than batch_size" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("num_workers", [1, 3, 7])
def test_every_sample_once_whatever_the_worker_count(rows_dataset, num_workers):
    """B02: 100 samples in shards that do not divide evenly; each exactly once; batches == len(loader)."""
    dataset = rows_dataset(100, 3, block_rows=7, batch_size=4)
    ids, batches, length = ids_and_batches(dataset, batch_size=4, num_workers=num_workers)
    assert sorted(ids) == list(range(100)) and batches == length == 25


def test_four_ranks_get_equal_batch_counts_from_packed_blocks(rows_dataset):
    """B03: 100 items packed 10 per block, batch 2, drop_last, world size 4: equal batches and len() on
    every rank; together they cover the dataset minus at most the remainder (none here: 100 = 4 x 25)."""
    per_rank, counts, union = [], [], []
    for rank in range(4):
        dataset = rows_dataset(100, 1, block_rows=10, batch_size=2, rank=rank, world_size=4, drop_last=True)
        ids, batches, length = ids_and_batches(dataset, batch_size=2, num_workers=1, drop_last=True)
        per_rank.append(len(ids))
        counts.append((batches, length))
        union.extend(ids)
    assert counts == [(12, 12)] * 4 and per_rank == [24] * 4  # 25 per rank, the last odd sample dropped
    assert len(set(union)) == len(union) == 96
