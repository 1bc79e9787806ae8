"""A tier too small for the dataset's blocks (case B13): reads bypass it, and the user is told at start."""

from __future__ import annotations

import logging

from helpers import put_indexed_objects

from tierload.config.loading import load_config
from tierload.data.blocks import Block
from tierload.data.tier_fit import fitting, hot_fit_problem, prefetch_window_bytes


def _blocks(*lengths: int) -> list[Block]:
    return [Block(key=f"k{i}", url=f"s3://b/o{i}", version="v", offset=0, length=length)
            for i, length in enumerate(lengths)]


def test_a_hot_tier_smaller_than_the_largest_block_is_named_with_what_would_be_right():
    config = load_config({"hot": {"capacity_bytes": "1KiB"}, "prefetch": {"depth_blocks": 4}}, environ={})
    problem = hot_fit_problem(config, _blocks(3000, 5000, 2000))
    assert problem is not None
    assert "hot.capacity_bytes is 1.0 KiB" in problem and "largest block (4.9 KiB, s3://b/o1)" in problem
    assert "bypass the hot tier" in problem and "at least 9.8 KiB" in problem  # the 3 blocks of a 4-deep window


def test_a_hot_tier_smaller_than_the_prefetch_window_is_named():
    config = load_config({"hot": {"capacity_bytes": 8000}, "prefetch": {"depth_blocks": 4}}, environ={})
    problem = hot_fit_problem(config, _blocks(3000, 3000, 3000, 3000, 3000))
    assert problem is not None and "prefetch window" in problem and "11.7 KiB" in problem
    roomy = load_config({"hot": {"capacity_bytes": 12000}, "prefetch": {"depth_blocks": 4}}, environ={})
    assert hot_fit_problem(roomy, _blocks(3000, 3000, 3000, 3000, 3000)) is None


def test_prefetch_window_and_fitting():
    assert prefetch_window_bytes([10, 30, 20], depth_blocks=2, depth_bytes=1000) == 50
    assert prefetch_window_bytes([10, 30, 20], depth_blocks=2, depth_bytes=25) == 30  # never below one block
    assert prefetch_window_bytes([10, 30, 20], depth_blocks=0, depth_bytes=1000) == 0
    fit, too_large = fitting(_blocks(10, 30, 20), 20)
    assert [b.length for b in fit] == [10, 20] and [b.length for b in too_large] == [30]


def test_a_dataset_with_a_one_kib_hot_tier_warns_once_at_start_and_still_reads_every_sample(
        s3, bucket, tier_config, make_dataset, caplog):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/tiny-hot", 8, size=3000)
    config = tier_config(hot="1KiB", cold={"storage_options": s3.storage_options})
    with caplog.at_level(logging.WARNING, logger="tierload.data.tier_fit"):
        job = make_dataset(f"s3://{name}/tiny-hot", config, layout="files", batch_size=2)
        job.start()
        job.set_epoch(0)
        assert sum(1 for _ in job) == 8  # bypass: every sample still arrives
        job.start()
    warnings = [r.getMessage() for r in caplog.records if r.name == "tierload.data.tier_fit"]
    assert len(warnings) == 1, warnings
    assert "hot.capacity_bytes is 1.0 KiB" in warnings[0] and "2.9 KiB" in warnings[0], warnings
