"""Ray Train's TorchTrainer with 2 CPU workers on a local Ray: each worker is a torch.distributed rank
that reads its own slice; together they see every row once per epoch (plus the documented padding).

moto S3 over HTTP, a real local Ray; nothing mocked.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("ray.train.torch", reason="Ray Train is not installed (pip install 'tierload[train]')")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from demo_data import write_npy_dataset  # noqa: E402
from ray_train import fit  # noqa: E402


def test_torchtrainer_workers_split_every_epoch_exactly(s3, ray_session, bucket, tier_config, make_dataset,
                                                         tmp_path, monkeypatch):
    # Ray Train's preemption watcher (an actor of its own that polls whether a node drains) has
    # nothing to watch on one local node; without it the run starts one process fewer.
    monkeypatch.setenv("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
    name, fs = bucket
    url = f"s3://{name}/rows"
    write_npy_dataset(fs, url.removeprefix("s3://"), 21, dim=4, files=2)
    config = tier_config(hot="1MiB", warm=None, manifest={"block_bytes": 64})
    make_dataset(url, config)  # this process owns the node cache, so it outlives the training workers
    records = tmp_path / "records"
    records.mkdir()
    result = fit(url, storage_options=s3.storage_options, tierload_config=config.to_dict(), num_workers=2,
                 epochs=2, batch_size=4, storage_path=str(tmp_path / "ray_results"), record_dir=str(records))
    assert result.error is None
    orders = []
    for epoch in range(2):
        ranks = [json.loads((records / f"rank{rank}-epoch{epoch}.json").read_text()) for rank in range(2)]
        assert [r["batches"] for r in ranks] == [3, 3] and [r["len_loader"] for r in ranks] == [3, 3]
        seen = Counter(i for r in ranks for i in r["ids"])
        assert set(seen) == set(range(21)) and sum(seen.values()) == 22  # ceil(21/2) each: one repeat
        orders.append(ranks[0]["ids"])
    assert orders[0] != orders[1]
