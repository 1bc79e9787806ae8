"""A tier directory that turns read-only or full while running, and a RAM level smaller than its
capacity (issue 12 item 2).

The faults are real: tier directories are tmpfs mounts made for the test, remounted read-only
while blocks are being written (root ignores ``chmod``, so a read-only mount is the way to
make writes fail with EROFS here), and a tmpfs smaller than a level's capacity fills up
(ENOSPC). Where mounting is not permitted the tests are skipped, saying so. The end-to-end
tests are in tests/test_tier_dirs_ray.py; the tests here drive a hot tier, a warm store and the
coordinator in this process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

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

from tierload.config.loading import load_config
from tierload.frames.checksum import checksum
from tierload.node.hot_tier import HotTier
from tierload.node.oracle import PlanOracle
from tierload.policies.counts import AccessCounts, PinCounts
from tierload.policies.frequency import DecayingCounter
from tierload.stores.tier_writes import open_warm_or_none


# ------------------------------------------------------------------ the hot tier alone
def make_hot_tier(tmp_path: Path, hot: dict) -> tuple[HotTier, AccessCounts]:
    config = load_config({"hot": {"dir": str(tmp_path / "hot"), "write_retry_s": 0.3, **hot},
                          "warm": {"url": None}, "policy": {"hot": {"eviction": "lru", "admit_min_count": 0}}})
    accesses = AccessCounts(DecayingCounter(4.0))
    tier = HotTier(config, config.hot.dir, accesses, PinCounts(), PlanOracle(lambda keys: {}, {}),
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
    level = tier.stats()[0].to_dict()
    assert level["writable"] is False and level["reserved_blocks"] == 0
    assert level["used_bytes"] == sum(block_files(hot).values())  # no leaked reservation, no lost victim
    assert sorted(tier.resident_keys()) == sorted(block_files(hot)) == sorted(k for k, _, _ in blocks[:9])
    assert all(tier.read_frame(key) is not None for key, _, _ in blocks[:9])  # still served
    assert tierload_lines(caplog, REFUSES) == 1  # the cause, once, for 51 refusals
    assert "Read-only file system" in caplog.text and "Traceback" not in caplog.text

    mounts.remount(hot, read_only=False)
    time.sleep(0.35)  # write_retry_s: then one write is tried again
    assert tier.place(*blocks[59]) == 0
    assert tier.stats()[0].writable is True
    assert tierload_lines(caplog, "takes writes again") == 1
    assert tier.stats()[0].used_bytes == sum(block_files(hot).values())


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
    ram, disk = (level.to_dict() for level in tier.stats())
    assert ram["used_bytes"] == sum(block_files(small_ram_level).values()) and ram["reserved_blocks"] == 0
    assert disk["used_bytes"] == sum(block_files(tmp_path / "hot").values()) and disk["reserved_blocks"] == 0
    assert ram["capacity_bytes"] < 128 * 1024  # lowered to what the file system holds
    assert tierload_lines(caplog, FULL) == 1 and "Traceback" not in caplog.text


def test_a_warm_dir_that_cannot_be_made_runs_without_a_warm_tier_and_a_read_only_one_opens(tmp_path, mounts,
                                                                                          caplog):
    """Case B42: a warm dir that cannot be made: no warm tier (warned); a read-only one opens"""
    from tierload.coordinator.actor import Coordinator

    frozen = mounts.tmpfs(tmp_path / "frozen", "1m", "ro")
    assert open_warm_or_none(str(frozen / "missing")) is None
    assert "running without a warm tier" in caplog.text
    store = open_warm_or_none(str(frozen))  # exists, empty, read-only: opens, holds nothing
    assert store is not None and store.scan() == {}
    coordinator = Coordinator({"warm": {"url": str(frozen / "missing"), "capacity_bytes": 2**20}},
                              node_alive=lambda: None).start()
    assert coordinator.stats().warm.blocks == 0


def test_a_read_only_warm_tier_is_used_again_once_writable(tmp_path, mounts, caplog):
    """The node's side and the coordinator's, in one process: refused writes give their
    reservations back, the node stops proposing for ``warm.write_retry_s``, and proposes
    (and writes) again once the directory is writable again."""
    from tierload.coordinator.actor import Coordinator
    from tierload.node.coordinator_sync import CoordinatorSync
    from tierload.wire.api import CoordinatorAPI, LocalCaller

    caplog.set_level(logging.INFO, logger="tierload")
    warm = mounts.tmpfs(tmp_path / "warm", "4m")
    coordinator = Coordinator({"warm": {"url": str(warm), "capacity_bytes": 2**20, "write_retry_s": 0.3}},
                              node_alive=lambda: None).start()
    blocks = [block(i, 3000) for i in range(30)]
    counts = {key: 1.0 for key, _, _ in blocks}
    sync = CoordinatorSync("node-a", LocalCaller(coordinator, CoordinatorAPI),
                           lambda full: (counts, [], [], [] if full else None), lambda: 0.0,
                           warm_store=open_warm_or_none(str(warm)), write_retry_s=0.3)

    def offer(chunk) -> None:
        for key, raw, digest in chunk:
            sync.offer_fetched(key, raw, digest)
        sync.flush()

    offer(blocks[:10])
    assert coordinator.stats().warm.blocks == 10 == len(block_files(warm))
    mounts.remount(warm, read_only=True)
    offer(blocks[10:20])  # granted by the coordinator, refused by the file system
    offer(blocks[20:25])  # not even proposed: the tier refuses writes
    stats = coordinator.stats().warm.to_dict()
    assert stats["reserved_blocks"] == 0 and stats["blocks"] == 10 == len(block_files(warm))
    assert stats["used_bytes"] == sum(block_files(warm).values())
    assert sync.stats["warm_write_errors"] == 1 and tierload_lines(caplog, REFUSES) == 1
    mounts.remount(warm, read_only=False)
    time.sleep(0.35)
    offer(blocks[25:])
    stats = coordinator.stats().warm.to_dict()
    assert stats["blocks"] == len(block_files(warm)) > 10 and stats["reserved_blocks"] == 0
    assert tierload_lines(caplog, "takes writes again") == 1 and "Traceback" not in caplog.text
