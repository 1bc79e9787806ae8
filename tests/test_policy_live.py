"""Switching policies on running actors (what `tierload policy set` does)."""

from __future__ import annotations

import pytest
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.deploy.runtime import apply_policy
from tierload.errors import ConfigError


def test_a_new_policy_reaches_running_actors_and_a_bad_one_changes_nothing(bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=1000)
    config = tier_config(hot="12KiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")

    def epoch(number):
        dataset.set_epoch(number)
        loader = DataLoader(dataset, batch_size=5, collate_fn=lambda batch: batch)
        return sorted(index_of(sample) for batch in loader for sample, _ in batch)

    assert epoch(0) == list(range(30))
    assert dataset.cache_stats()["levels"][0]["policy"] == "clairvoyant"
    with pytest.raises(ConfigError, match="unknown policy 'fifo'"):
        apply_policy(config, {"hot": {"eviction": "fifo"}})
    assert dataset.cache_stats()["levels"][0]["policy"] == "clairvoyant"  # the old policy stays
    result = apply_policy(config, {"hot": {"eviction": "lru"}, "warm": {"eviction": "keep"}})
    assert result["coordinator"] and len(result["nodes"]) == 1
    assert result["policy"]["warm"]["eviction"] == "keep"
    level = dataset.cache_stats()["levels"][0]
    assert level["policy"] == "lru" and level["blocks"] > 0  # residents kept, handed to the new policy
    assert epoch(1) == list(range(30))  # the job goes on under the new policy
