"""A tier directory that turns read-only or full while running, and a RAM level smaller than its
capacity (issue 12 item 2).

The faults are real: tier directories are tmpfs mounts made for the test, remounted read-only
while blocks are being written (root ignores ``chmod``, so a read-only mount is the way to
make writes fail with EROFS here), and a tmpfs smaller than a level's capacity fills up
(ENOSPC). Where mounting is not permitted the tests are skipped, saying so. The end-to-end
tests run a real local Ray and the local S3 server (moto over HTTP).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import actor_log_lines, index_of, land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.cache.control_dir import fallback_dir
from tierload.cache.endpoint import ENDPOINT_FILE
from tierload.cache.hot_tier import HotTier, ram_level_dir
from tierload.cache.oracle import PlanOracle
from tierload.cache.tier_writes import open_warm_or_none
from tierload.checksum import checksum
from tierload.checksum_key import KEY_FILE
from tierload.config import load_config
from tierload.counts import AccessCounts, PinCounts
from tierload.policies.frequency import DecayingCounter

REFUSES = "refuses writes"
FULL = "is full at"
TOO_BIG = "exceeds the size of its file system"


# ---------------------------------------------------------------------------- mounts
class Mounts:
    """tmpfs mounts made by one test, unmounted at its end."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def tmpfs(self, path: Path, size: str, *options: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        opts = ",".join((f"size={size}", "mode=0700", *options))
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
        self.paths.append(path)
        return path

    @staticmethod
    def remount(path: Path, read_only: bool) -> None:
        """Remount ``path`` read-only or read-write (a writer with a file open makes the kernel
        answer EBUSY for a moment: tried again until it goes through)."""
        mode = "ro" if read_only else "rw"
        deadline = time.monotonic() + 30
        while True:
            proc = subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], capture_output=True)
            if proc.returncode == 0:
                return
            assert time.monotonic() < deadline, proc.stderr.decode()
            time.sleep(0.005)

    def close(self) -> None:
        for path in reversed(self.paths):
            subprocess.run(["umount", "-l", str(path)], check=False)
        self.paths.clear()


@pytest.fixture
def mounts():
    made = Mounts()
    yield made
    made.close()


def assert_writes_fail(path: Path) -> None:
    """The fault is real: even root cannot write there."""
    try:
        (path / "probe").write_bytes(b"x")
    except OSError as exc:
        assert exc.errno in (errno.EROFS, errno.EACCES, errno.ENOSPC)
    else:
        raise AssertionError(f"{path} still takes writes")


def block_files(path: Path) -> dict[str, int]:
    """``{name: size}`` of the complete block files under a tier directory."""
    return {p.name: p.stat().st_size for p in path.rglob("*")
            if p.is_file() and ".tmp" not in p.relative_to(path).parts and p.name != ENDPOINT_FILE
            and not p.name.startswith(".tierload")}  # tierload's own files (owner lock, key, marker)


def tierload_lines(caplog, needle: str) -> int:
    return sum(needle in record.getMessage() for record in caplog.records if record.name.startswith("tierload"))


# ------------------------------------------------------------------ the hot tier alone
def make_hot_tier(tmp_path: Path, hot: dict) -> tuple[HotTier, AccessCounts]:
    config = load_config({"hot": {"dir": str(tmp_path / "hot"), "write_retry_s": 0.3, **hot},
                          "warm": {"url": None}, "policy": {"hot": {"eviction": "lru", "admit_min_count": 0}}})
    accesses = AccessCounts(DecayingCounter(4.0))
    tier = HotTier(config, config.hot.dir, accesses, PinCounts(), PlanOracle({}, {}),
                   threading.RLock(), lambda: 0.0)
    return tier, accesses


def block(index: int, size: int) -> tuple[str, bytes, int]:
    raw = f"{index:08d}".encode() + os.urandom(size - 8)
    key = f"blk-{index:032x}"
    return key, raw, checksum(raw)


def test_a_hot_level_remounted_read_only_stops_admitting_keeps_serving_and_says_so_once(tmp_path, mounts, caplog):
    """Case F02: a hot level turned read-only stops admitting, keeps serving, says so once; index equals disk"""
    caplog.set_level(logging.DEBUG, logger="tierload")
    hot = mounts.tmpfs(tmp_path / "hot", "4m")
    tier, _ = make_hot_tier(tmp_path, {"capacity_bytes": 40_000})
    tier.start()
    blocks = [block(i, 4000) for i in range(60)]
    placed = [tier.place(*blocks[i]) for i in range(9)]  # 9 x ~4 KiB: the level is nearly full
    assert placed == [0] * 9
    mounts.remount(hot, read_only=True)
    assert_writes_fail(hot)
    for key, raw, digest in blocks[9:]:  # each needs victims now: their files cannot be deleted
        assert tier.place(key, raw, digest) is None
    level = tier.stats()[0]
    assert level["writable"] is False and level["reserved_blocks"] == 0
    assert level["used_bytes"] == sum(block_files(hot).values())  # no leaked reservation, no lost victim
    assert sorted(tier.resident_keys()) == sorted(block_files(hot)) == sorted(k for k, _, _ in blocks[:9])
    assert all(tier.read_frame(key) is not None for key, _, _ in blocks[:9])  # still served
    assert tierload_lines(caplog, REFUSES) == 1  # the cause, once, for 51 refusals
    assert "Read-only file system" in caplog.text and "Traceback" not in caplog.text

    mounts.remount(hot, read_only=False)
    time.sleep(0.35)  # write_retry_s: then one write is tried again
    assert tier.place(*blocks[59]) == 0
    assert tier.stats()[0]["writable"] is True
    assert tierload_lines(caplog, "takes writes again") == 1
    assert tier.stats()[0]["used_bytes"] == sum(block_files(hot).values())


@pytest.fixture
def small_ram_level(tmp_path, mounts):
    """The RAM level's directory (in /dev/shm) on a 128 KiB tmpfs."""
    ram = Path(ram_level_dir(str(tmp_path / "hot")))
    mounts.tmpfs(ram, "128k")
    yield ram
    mounts.close()
    shutil.rmtree(ram, ignore_errors=True)


def test_a_ram_level_smaller_than_its_capacity_hands_what_does_not_fit_to_the_disk_level(tmp_path, small_ram_level,
                                                                                        caplog):
    """Case B43: the RAM level's overflow is placed on the disk level; the mismatch is warned at start"""
    caplog.set_level(logging.INFO, logger="tierload")
    tier, _ = make_hot_tier(tmp_path, {"capacity_bytes": 4 * 2**20, "ram_capacity_bytes": 4 * 2**20})
    tier.start()
    assert tierload_lines(caplog, TOO_BIG) == 1  # the RAM level's 4 MiB on a 128 KiB file system
    blocks = [block(i, 8000) for i in range(40)]  # 320 kB: more than the RAM level holds
    levels = [tier.place(*b) for b in blocks]
    assert None not in levels and levels.count(1) > 0 and levels.count(0) > 0
    assert sorted(tier.resident_keys()) == sorted(k for k, _, _ in blocks)  # every block kept, none lost
    ram, disk = tier.stats()
    assert ram["used_bytes"] == sum(block_files(small_ram_level).values()) and ram["reserved_blocks"] == 0
    assert disk["used_bytes"] == sum(block_files(tmp_path / "hot").values()) and disk["reserved_blocks"] == 0
    assert ram["capacity_bytes"] < 128 * 1024  # lowered to what the file system holds
    assert tierload_lines(caplog, FULL) == 1 and "Traceback" not in caplog.text


def test_a_warm_dir_that_cannot_be_made_runs_without_a_warm_tier_and_a_read_only_one_opens(tmp_path, mounts,
                                                                                          caplog):
    """Case B42: a warm dir that cannot be made: no warm tier (warned); a read-only one opens"""
    from tierload.cache.coordinator import Coordinator

    frozen = mounts.tmpfs(tmp_path / "frozen", "1m", "ro")
    assert open_warm_or_none(str(frozen / "missing")) is None
    assert "running without a warm tier" in caplog.text
    store = open_warm_or_none(str(frozen))  # exists, empty, read-only: opens, holds nothing
    assert store is not None and store.scan() == {}
    coordinator = Coordinator({"warm": {"url": str(frozen / "missing"), "capacity_bytes": 2**20}},
                              node_alive=lambda: None).start()
    assert coordinator.stats()["warm"]["blocks"] == 0


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
    import ray

    from tierload.cache.runtime import coordinator_name

    coordinator = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
    return ray.get(coordinator.stats.remote())


def test_hot_dir_remounted_read_only_mid_epoch(bucket, tier_config, make_dataset, tmp_path, mounts):
    """Case F02. Read-only at batch 5: the epoch goes on (no EROFS in the loop), the hot tier serves what it
    holds, the rest comes from cold; the index matches the disk; the cause is logged once; once
    writable again the tier admits again."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 48, size=6000)
    hot = mounts.tmpfs(tmp_path / "hot", "8m")
    config = with_hot(tier_config(hot="150KiB", warm=None), write_retry_s=1.0)  # holds about half the data
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
    from tierload.cache.runtime import stop_actors

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
    stats = warm_stats(config)["warm"]
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
    assert warm_stats(config)["warm"]["blocks"] == 0 and warm_stats(config)["warm"]["reserved_blocks"] == 0
    assert dataset.epoch_stats(1).get("cold_gets", 0) == 0  # the hot tier works
    assert actor_log_lines(dataset.cache_stats()["pid"], "is not writable") == 1


def test_a_filled_warm_dir_read_only_at_start_serves_its_hits(bucket, tier_config, make_dataset, tmp_path, mounts):
    """Case B42: a warm tier filled by an earlier run and read-only when the next run starts: one
    warning, and every block it holds is served from it (no cold GET)."""
    from tierload.cache.runtime import stop_actors

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


def test_a_read_only_warm_tier_is_used_again_once_writable(tmp_path, mounts, caplog):
    """The node's side and the coordinator's, in one process: refused writes give their
    reservations back, the node stops proposing for ``warm.write_retry_s``, and proposes
    (and writes) again once the directory is writable again."""
    from tierload.cache.coordinator import Coordinator
    from tierload.cache.coordinator_sync import CoordinatorSync

    caplog.set_level(logging.INFO, logger="tierload")
    warm = mounts.tmpfs(tmp_path / "warm", "4m")
    coordinator = Coordinator({"warm": {"url": str(warm), "capacity_bytes": 2**20, "write_retry_s": 0.3}},
                              node_alive=lambda: None).start()
    blocks = [block(i, 3000) for i in range(30)]
    counts = {key: 1.0 for key, _, _ in blocks}
    sync = CoordinatorSync("node-a", lambda method, *args: getattr(coordinator, method)(*args),
                           lambda full: (counts, [], [], [] if full else None), lambda: 0.0,
                           warm_store=open_warm_or_none(str(warm)), write_retry_s=0.3)

    def offer(chunk) -> None:
        for key, raw, digest in chunk:
            sync.offer_fetched(key, raw, digest)
        sync.flush()

    offer(blocks[:10])
    assert coordinator.stats()["warm"]["blocks"] == 10 == len(block_files(warm))
    mounts.remount(warm, read_only=True)
    offer(blocks[10:20])  # granted by the coordinator, refused by the file system
    offer(blocks[20:25])  # not even proposed: the tier refuses writes
    stats = coordinator.stats()["warm"]
    assert stats["reserved_blocks"] == 0 and stats["blocks"] == 10 == len(block_files(warm))
    assert stats["used_bytes"] == sum(block_files(warm).values())
    assert sync.stats["warm_write_errors"] == 1 and tierload_lines(caplog, REFUSES) == 1
    mounts.remount(warm, read_only=False)
    time.sleep(0.35)
    offer(blocks[25:])
    stats = coordinator.stats()["warm"]
    assert stats["blocks"] == len(block_files(warm)) > 10 and stats["reserved_blocks"] == 0
    assert tierload_lines(caplog, "takes writes again") == 1 and "Traceback" not in caplog.text
