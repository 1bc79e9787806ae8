"""A tier directory that turns read-only or full while a job runs, and a RAM level smaller than
its capacity (issue 12 item 2), end to end: a real local Ray, the local S3 server (moto over
HTTP), epochs through a DataLoader. The faults are real tmpfs mounts (tests/tier_dir_faults.py);
where mounting is not permitted the tests are skipped, saying so. The same faults on a tier in
this process: tests/test_tier_dirs.py.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import actor_log_lines, index_of, land_warm_writes, put_indexed_objects
from tier_dir_faults import (  # noqa: F401 - fixtures, used by name
    FULL,
    REFUSES,
    TOO_BIG,
    assert_writes_fail,
    block_files,
    mounts_fixture,
    small_ram_level_fixture,
    tierload_lines,
)
from torch.utils.data import DataLoader

from tierload.frames.checksum_key import KEY_FILE
from tierload.stores.control_dir import fallback_dir
from tierload.wire.endpoint import ENDPOINT_FILE


# ------------------------------------------------------------ end to end: Ray, S3, epochs
def collect_raw(batch):
    return [item[0] for item in batch]


def run_epoch(dataset, epoch: int, on_batch=None) -> list[tuple[int, bytes]]:
    dataset.set_epoch(epoch)
    got = []
    for batch_index, samples in enumerate(DataLoader(dataset, batch_size=4, collate_fn=collect_raw)):
        got.extend((index_of(sample), bytes(sample)) for sample in samples)
        if on_batch is not None:
            on_batch(batch_index)
    return got


def assert_exactly_once(got: list[tuple[int, bytes]], payloads: list[bytes]) -> None:
    assert sorted(index for index, _ in got) == list(range(len(payloads)))  # every sample, once
    assert all(data == payloads[index] for index, data in got)  # with its exact bytes


def with_hot(config, **updates):
    return config.model_copy(update={"hot": config.hot.model_copy(update=updates)})


def settled_levels(dataset, timeout_s: float = 60.0) -> list[dict]:
    """The hot levels' stats once no fetch is in flight (so no write is under way)."""
    deadline = time.monotonic() + timeout_s
    while True:
        stats = dataset.cache_stats()
        if not stats["inflight"]:
            return stats["levels"]
        assert time.monotonic() < deadline, "the node cache's fetches never finished"
        time.sleep(0.02)


def warm_stats(config) -> dict:
    """The warm tier's stats, in their plain shape."""
    import ray

    from tierload.deploy.actors import coordinator_name

    coordinator = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
    return ray.get(coordinator.stats.remote()).warm.to_dict()


def test_hot_dir_remounted_read_only_mid_epoch(bucket, tier_config, make_dataset, tmp_path, mounts):
    """Case F02. Read-only at batch 5: the epoch goes on (no EROFS in the loop), the hot tier serves what it
    holds, the rest comes from cold; the index matches the disk; the cause is logged once; once
    writable again the tier admits again."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 48, size=6000)
    hot = mounts.tmpfs(tmp_path / "hot", "8m")
    # Holds about half the data. A prefetch window of a few blocks, not the whole epoch: every block in the
    # window is pinned, so with a window as long as the epoch no resident could make room in epoch 3 until
    # the loop had consumed one, and on a loaded machine every cold fetch could land (and bypass the
    # level) before that, so no write was tried and the level never learnt it was writable again.
    config = with_hot(tier_config(hot="150KiB", warm=None, prefetch={"depth_blocks": 4}), write_retry_s=1.0)
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")

    def freeze(batch_index: int) -> None:
        if batch_index == 5:
            mounts.remount(hot, read_only=True)

    assert_exactly_once(run_epoch(dataset, 0, freeze), payloads)
    assert_writes_fail(hot)
    for epoch in (1, 2):  # a full level whose victims cannot be deleted, and no room to admit
        assert_exactly_once(run_epoch(dataset, epoch), payloads)
        (level,) = settled_levels(dataset)
        assert level["writable"] is False and level["reserved_blocks"] == 0
        assert level["used_bytes"] == sum(block_files(hot).values())  # no leaked reservation
        assert level["blocks"] == len(block_files(hot))
    held = level["blocks"]
    assert dataset.epoch_stats(2)["cold_gets"] == 48 - held  # what the hot tier holds is served from it
    pid = dataset.cache_stats()["pid"]
    assert actor_log_lines(pid, REFUSES) == 1
    assert actor_log_lines(pid, "Traceback") == 0

    mounts.remount(hot, read_only=False)
    time.sleep(1.1)  # hot.write_retry_s: then one write is tried again, and it goes through
    assert_exactly_once(run_epoch(dataset, 3), payloads)
    (level,) = settled_levels(dataset)
    assert level["writable"] is True and level["reserved_blocks"] == 0
    assert level["used_bytes"] == sum(block_files(hot).values())
    assert actor_log_lines(pid, "takes writes again") == 1


@pytest.fixture
def control_files_of(request):
    """``control_files_of(hot)``: the directory holding a read-only hot dir's control files,
    removed at the test's end (it lives in /dev/shm, not under tmp_path)."""
    def where(hot: Path) -> Path:
        path = Path(fallback_dir(hot))
        request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
        return path
    return where


def test_an_empty_read_only_hot_dir_at_start_is_one_warning_and_the_job_reads_lower_tiers(
        bucket, tier_config, make_dataset, tmp_path, mounts, control_files_of):
    """Read-only before the job starts: the node cache keeps its lock, endpoint and key beside
    it (a private runtime directory), says so once, and every sample comes from warm or cold."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 16, size=3000)
    hot = mounts.tmpfs(tmp_path / "hot", "1m", "ro")
    assert_writes_fail(hot)
    control = control_files_of(hot)
    config = tier_config(hot="1MiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    for epoch in (0, 1):
        assert_exactly_once(run_epoch(dataset, epoch), payloads)
    (level,) = settled_levels(dataset)
    assert level["writable"] is False and level["blocks"] == 0 and level["reserved_blocks"] == 0
    land_warm_writes(dataset)
    assert dataset.epoch_stats(1).get("cold_gets", 0) == 0  # epoch 1 came from the warm tier
    assert block_files(hot) == {} and os.listdir(hot) == []
    assert {KEY_FILE, ENDPOINT_FILE} <= set(os.listdir(control))  # where the consumers found them
    pid = dataset.cache_stats()["pid"]
    assert actor_log_lines(pid, "is read-only") == 1
    assert actor_log_lines(pid, REFUSES) == 0  # the start-up warning said it all
    assert actor_log_lines(pid, "Traceback") == 0


def test_a_filled_hot_dir_read_only_at_start_serves_its_blocks(bucket, tier_config, make_dataset, tmp_path,
                                                               mounts, control_files_of):
    """A job fills the hot tier; the directory is remounted read-only; the next job (a new node
    cache) serves the blocks it holds from it and the rest from cold, adding none."""
    from tierload.deploy.runtime import stop_actors

    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 24, size=6000)
    hot = mounts.tmpfs(tmp_path / "hot", "8m")
    config = tier_config(hot="80KiB", warm=None)  # holds about half the data
    first = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert_exactly_once(run_epoch(first, 0), payloads)
    settled_levels(first)
    stop_actors(first.config)
    held = block_files(hot)
    assert 0 < len(held) < 24
    mounts.remount(hot, read_only=True)
    assert_writes_fail(hot)
    control_files_of(hot)

    second = make_dataset(f"s3://{name}/ds", config, layout="files")
    for epoch in (0, 1):
        assert_exactly_once(run_epoch(second, epoch), payloads)
        (level,) = settled_levels(second)
        assert level["writable"] is False and level["blocks"] == len(held) and level["reserved_blocks"] == 0
        assert second.epoch_stats(epoch)["cold_gets"] == 24 - len(held)  # its hits come from the hot tier
    assert block_files(hot) == held
    pid = second.cache_stats()["pid"]
    assert actor_log_lines(pid, "is read-only") == 1
    assert actor_log_lines(pid, "Traceback") == 0


def test_a_full_hot_dir_is_told_once_and_its_accounting_matches_the_disk(bucket, tier_config, make_dataset,
                                                                        tmp_path, mounts):
    """Case F02. A 64 KiB tmpfs under a 1 MiB hot tier: 3 epochs, every sample once, one warning at start
    (capacity above the file system's size) and one when it fills, no traceback."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 24, size=10_000)
    hot = mounts.tmpfs(tmp_path / "hot", "64k")
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm=None), layout="files")
    for epoch in range(3):
        assert_exactly_once(run_epoch(dataset, epoch), payloads)
        (level,) = settled_levels(dataset)
        assert level["used_bytes"] == sum(block_files(hot).values()) and level["reserved_blocks"] == 0
    assert 0 < level["blocks"] < 24
    assert level["capacity_bytes"] < 64 * 1024  # lowered to what the file system holds
    assert dataset.epoch_stats(2)["cold_gets"] <= 24 - level["blocks"]
    pid = dataset.cache_stats()["pid"]
    assert actor_log_lines(pid, TOO_BIG) == 1
    assert actor_log_lines(pid, FULL) == 1
    assert actor_log_lines(pid, "Traceback") == 0


def test_a_ram_level_smaller_than_its_capacity_spills_to_disk_and_epoch_two_reads_no_s3(
        bucket, tier_config, make_dataset, tmp_path, small_ram_level):
    """Case B43: RAM level 4 MiB on a 128 KiB tmpfs: the rest lands on disk, later epochs read no S3, one start-up
    warning"""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 40, size=8000)  # 320 kB; the RAM level holds ~110 kB
    config = with_hot(tier_config(hot="4MiB", warm=None), ram_capacity_bytes=4 * 2**20)
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert_exactly_once(run_epoch(dataset, 0), payloads)
    ram, disk = settled_levels(dataset)
    assert ram["blocks"] > 0 and ram["blocks"] + disk["blocks"] == 40  # what RAM cannot hold is on disk
    assert ram["used_bytes"] == sum(block_files(small_ram_level).values())
    assert disk["used_bytes"] == sum(block_files(tmp_path / "hot").values())
    for epoch in (1, 2):
        assert_exactly_once(run_epoch(dataset, epoch), payloads)
        assert dataset.epoch_stats(epoch).get("cold_gets", 0) == 0
    pid = dataset.cache_stats()["pid"]
    assert actor_log_lines(pid, TOO_BIG) == 1 and actor_log_lines(pid, FULL) == 1
    assert actor_log_lines(pid, "Traceback") == 0


def check_warm_matches_its_dir(dataset, config, warm: Path) -> dict:
    land_warm_writes(dataset)
    stats = warm_stats(config)
    assert stats["reserved_blocks"] == 0  # no leaked reservation
    assert stats["used_bytes"] == sum(block_files(warm).values())
    assert stats["blocks"] == len(block_files(warm)) > 0
    return stats


@pytest.mark.parametrize("frozen_at", ["epoch 0, warm with room", "epoch 1, warm full"])
def test_warm_dir_remounted_read_only_mid_epoch(bucket, tier_config, make_dataset, tmp_path, mounts, frozen_at):
    """Case F02. The warm tier (no hot tier) turns read-only at batch 4: while it has room (its writes
    fail), or when full under LRU (its victims cannot be deleted). Every epoch delivers every
    sample once, warm serves what it holds, the coordinator's index matches the warm directory
    (no leaked reservation, no victim lost from the index), and no traceback is logged."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 40, size=5000)
    warm = mounts.tmpfs(tmp_path / "warm", "8m")
    full = frozen_at.endswith("full")
    config = tier_config(hot=0, warm="120KiB" if full else "1MiB", policy={"warm": {"eviction": "lru"}},
                         prefetch={"depth_blocks": 4})  # blocks are still fetched, and proposed, after batch 4
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")

    def freeze(batch_index: int) -> None:
        if batch_index == 4:
            land_warm_writes(dataset)  # some blocks are in warm, more are fetched and proposed after
            mounts.remount(warm, read_only=True)

    if full:  # the first epoch fills the warm tier (it holds about half the data), the second evicts
        assert_exactly_once(run_epoch(dataset, 0), payloads)
        land_warm_writes(dataset)
    assert_exactly_once(run_epoch(dataset, int(full), freeze), payloads)
    assert_writes_fail(warm)
    for epoch in (2, 3):
        assert_exactly_once(run_epoch(dataset, epoch), payloads)
        stats = check_warm_matches_its_dir(dataset, config, warm)
    assert dataset.epoch_stats(3)["cold_gets"] == 40 - stats["blocks"]  # warm served what it holds
    node_pid = dataset.cache_stats()["pid"]
    assert actor_log_lines(node_pid, "Traceback") == 0
    if not full:  # the node's writes were refused: said once
        assert actor_log_lines(node_pid, REFUSES) == 1 and stats["blocks"] < 40


def test_an_empty_read_only_warm_dir_at_start_is_a_warning_and_the_job_runs(bucket, tier_config, make_dataset,
                                                                           tmp_path, mounts):
    """Case B42: an empty read-only warm.url at start: one warning, the job runs from cold and hot"""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 12, size=3000)
    warm = mounts.tmpfs(tmp_path / "warm", "1m", "ro")
    assert_writes_fail(warm)
    config = tier_config(hot="1MiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    for epoch in (0, 1):
        assert_exactly_once(run_epoch(dataset, epoch), payloads)
    land_warm_writes(dataset)
    assert warm_stats(config)["blocks"] == 0 and warm_stats(config)["reserved_blocks"] == 0
    assert dataset.epoch_stats(1).get("cold_gets", 0) == 0  # the hot tier works
    assert actor_log_lines(dataset.cache_stats()["pid"], "is not writable") == 1


def test_a_filled_warm_dir_read_only_at_start_serves_its_hits(bucket, tier_config, make_dataset, tmp_path, mounts):
    """Case B42: a warm tier filled by an earlier run and read-only when the next run starts: one
    warning, and every block it holds is served from it (no cold GET)."""
    from tierload.deploy.runtime import stop_actors

    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 12, size=3000)
    warm = mounts.tmpfs(tmp_path / "warm", "1m")
    config = tier_config(hot=0, warm="1MiB")  # no hot tier: every read after the first run is warm's
    first = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert_exactly_once(run_epoch(first, 0), payloads)
    land_warm_writes(first)
    assert len(block_files(warm)) == 12
    stop_actors(config)  # the first run ends
    mounts.remount(warm, read_only=True)
    assert_writes_fail(warm)
    again = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert_exactly_once(run_epoch(again, 1), payloads)
    stats = again.epoch_stats(1)
    assert stats.get("cold_gets", 0) == 0 and stats["warm_hits"] == 12
    assert actor_log_lines(again.cache_stats()["pid"], "is not writable") == 1
