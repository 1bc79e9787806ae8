"""Real-world failure cases from ../shared/cases, turned into tests (IDs in each docstring):
streams cut off, full disks, killed and restarted actors, two instances on one directory,
leaks across epochs, forked workers (the rest: tests/test_cases.py, tests/test_cases_data.py).

Everything is real: moto's S3 server over HTTP (behind a fault-injecting proxy where a case
needs a fault), a local Ray, real directories.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import threading
import time

import pytest
from cases_common import collect_raw, indices, proxied
from faulty_s3 import FaultyS3
from helpers import index_of, land_warm_writes, put_indexed_objects, tier_bytes
from torch.utils.data import DataLoader


def test_b11_a_stream_cut_halfway_leaves_nothing_behind_and_is_retried(s3, bucket, tier_config, make_dataset,
                                                                        tmp_path):
    """Case B11 (a): the S3 body breaks off at 50%: no partial file, the read is retried, bytes are right."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 4, size=300_000)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.truncate_once.add("ds/0/obj-000002.bin")
        dataset = make_dataset(f"s3://{name}/ds", tier_config(), layout="files",
                               storage_options=proxied(s3, proxy))
        loader = DataLoader(dataset, batch_size=1, collate_fn=collect_raw)
        got = {index_of(s): bytes(s) for samples, _ in loader for s in samples}
        assert got == dict(enumerate(payloads))
        assert proxy.faults.gets["ds/0/obj-000002.bin"] == 2
    assert not list((tmp_path / "hot" / ".tmp").iterdir())
    stats = dataset.cache_stats()["levels"][0]
    assert stats["used_bytes"] == tier_bytes(tmp_path / "hot")


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
                          capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs here to fill a disk: {proc.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)  # lazily: the actor may still hold it open


def test_b11_a_full_disk_never_leaves_a_partial_block(s3, bucket, tier_config, make_dataset, tiny_disk):
    """Case B11 (b): the hot directory's disk fills (ENOSPC) mid-write: the block is still served, no
    temporary file or index entry is left, accounting matches the disk."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 6, size=30_000)
    config = tier_config(hot="1MiB", warm=None)
    config = config.model_copy(update={"hot": config.hot.model_copy(update={"dir": str(tiny_disk)})})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    got = {index_of(s): bytes(s) for samples, _ in DataLoader(dataset, batch_size=2, collate_fn=collect_raw)
           for s in samples}
    assert got == dict(enumerate(payloads))
    assert not list((tiny_disk / ".tmp").iterdir())
    level = dataset.cache_stats()["levels"][0]
    on_disk = tier_bytes(tiny_disk)
    assert level["used_bytes"] == on_disk and level["blocks"] < 6  # some blocks did not fit


def test_b11_b12_a_killed_cache_restarts_on_the_same_dirs_and_sweeps_leftovers(s3, bucket, tier_config,
                                                                               make_dataset, tmp_path):
    """Case B11 (c), Case B12: SIGKILL the node cache mid-epoch; a leftover temporary block from the dead
    process is never served and is swept; the restarted cache reuses complete blocks."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=1000)
    config = tier_config()
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert sorted(indices(dataset)) == list(range(30))
    pid = dataset.cache_stats()["pid"]
    key = dataset.manifest.blocks[0].key
    leftover = tmp_path / "hot" / ".tmp" / f"{key}.{pid}.dead"
    leftover.write_bytes(b"half of a block")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # Ray restarts the detached actor; a new dataset finds it by name
        try:
            again = make_dataset(f"s3://{name}/ds", config, layout="files")
            stats = again.cache_stats()
            break
        except Exception:  # noqa: BLE001 - restarting
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    assert stats["pid"] != pid and not leftover.exists()
    assert stats["levels"][0]["blocks"] == 30  # complete blocks adopted
    again.set_epoch(1)
    assert sorted(indices(again)) == list(range(30))
    assert again.epoch_stats(1)["cold_gets"] == 0


def test_b12_two_instances_at_once_on_different_and_on_the_same_dirs(s3, bucket, tier_config, make_dataset,
                                                                    tmp_path):
    """Case B12: two instances at once, on different dirs and on one dir, each read every sample once"""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 24, size=200)
    shared = tier_config()
    other = shared.model_copy(update={"hot": shared.hot.model_copy(update={"dir": str(tmp_path / "hot2")}),
                                      "warm": shared.warm.model_copy(update={"url": str(tmp_path / "warm2")})})
    first = make_dataset(f"s3://{name}/ds", shared, layout="files", batch_size=4)
    same_dir = make_dataset(f"s3://{name}/ds", shared, layout="files", batch_size=4, seed=5)
    other_dir = make_dataset(f"s3://{name}/ds", other, layout="files", batch_size=4)
    assert first._endpoint.address == same_dir._endpoint.address  # one owner per directory
    assert first._endpoint.address != other_dir._endpoint.address
    results = {}

    def run(label, dataset):
        results[label] = sorted(indices(dataset, num_workers=2))

    threads = [threading.Thread(target=run, args=item) for item in
               (("first", first), ("same", same_dir), ("other", other_dir))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == {label: list(range(24)) for label in ("first", "same", "other")}


def test_b13_the_source_is_never_touched_and_a_tiny_hot_tier_is_bypassed(ray_session, tier_config, make_dataset,
                                                                         tmp_path):
    """B13: a data set that lives only in a local directory (the cold tier, read-only) is
    unchanged after an epoch through a hot tier smaller than one object, which is bypassed."""
    source = tmp_path / "only-copy"
    for i in range(10):
        (source / str(i % 2)).mkdir(parents=True, exist_ok=True)
        (source / str(i % 2) / f"obj-{i:06d}.bin").write_bytes(f"{i:08d}".encode() + os.urandom(5000))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.rglob("*") if p.is_file()}
    dataset = make_dataset(f"file://{source}", tier_config(hot="4KiB", warm=None), layout="files",
                           storage_options={})
    assert sorted(indices(dataset)) == list(range(10))
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.rglob("*") if p.is_file()}
    assert after == before
    stats = dataset.epoch_stats(0)
    assert stats["wire_raw_bytes"] == 10 * 5008  # every block bypassed the hot tier
    assert dataset.cache_stats()["levels"][0]["blocks"] == 0


def test_b23_no_threads_fds_or_actors_leak_across_epochs(s3, bucket, tier_config, make_dataset):
    """B23: 15 epochs, breaking out early every other epoch: threads, open files and actors
    return to their baseline, in this process and in the node cache."""
    import ray

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 100, size=100)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(prefetch={"depth_blocks": 8}), layout="files",
                           batch_size=5)
    assert len(indices(dataset)) == 100

    def snapshot():
        actors = sum(1 for a in ray.util.list_named_actors(all_namespaces=True))
        return threading.active_count(), len(os.listdir("/proc/self/fd")), actors

    def open_files() -> set[str]:
        found = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        return found

    def settled(deadline_s: float = 10.0):
        # A socket or pipe this process shares with others (its Ray driver, the session's servers) may
        # still be closing when the epoch ends: a leak stays, a closing descriptor goes.
        until = time.monotonic() + deadline_s
        now = snapshot()
        while now != baseline and time.monotonic() < until:
            time.sleep(0.2)
            now = snapshot()
        return now

    baseline, files_before = snapshot(), open_files()
    cache_threads = dataset.cache_stats()["threads"]
    for epoch in range(1, 16):
        dataset.set_epoch(epoch)
        started = time.monotonic()
        loader = DataLoader(dataset, batch_size=5, collate_fn=collect_raw)
        for batch_index, _ in enumerate(loader):
            if epoch % 2 and batch_index == 3:
                break
        del loader
        assert time.monotonic() - started < 60
        assert settled() == baseline, f"epoch {epoch}: open now and not before: {open_files() - files_before}"
    stats = dataset.cache_stats()
    assert stats["threads"] <= cache_threads + 2 and len(stats["streams"]) == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_b25_the_cache_actor_dies_mid_epoch_and_the_epoch_finishes_exactly_once(s3, bucket, tier_config,
                                                                               make_dataset, num_workers):
    """B25: SIGKILL the node cache mid-epoch: readers serve blocks themselves from warm/cold until
    the restarted cache answers, reopen their streams there, and yield every sample once."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 60, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(prefetch={"depth_blocks": 2}), layout="files",
                           batch_size=2)
    pid = dataset.cache_stats()["pid"]
    seen: list[int] = []
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers, collate_fn=collect_raw)
    started = time.monotonic()
    for batch_index, (samples, _) in enumerate(loader):
        seen.extend(index_of(s) for s in samples)
        if batch_index == 5:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    assert sorted(seen) == list(range(60))
    assert time.monotonic() - started < 120
    if num_workers == 0:
        assert dataset.consumer_stats["fallback_reads"] + dataset.consumer_stats["reconnects"] > 0
    assert dataset.cache_stats()["pid"] != pid  # the restarted cache, found again by the dataset
    dataset.set_epoch(1)
    assert sorted(indices(dataset)) == list(range(60))


def test_the_node_cache_reconnects_to_a_restarted_coordinator(s3, bucket, tier_config, make_dataset):
    """Issue 4: the coordinator is a named, detached actor; after it restarts, nodes find it by
    name, see its new incarnation and resend their residency; the warm index is rebuilt from
    the warm store."""
    import ray

    from tierload.deploy.actors import coordinator_name

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=1000)
    config = tier_config(hot="12KiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert sorted(indices(dataset)) == list(range(30))
    coordinator = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
    land_warm_writes(dataset)  # the last warm writes and residency changes reach it
    before = ray.get(coordinator.stats.remote())
    assert before.warm.blocks == 30 and before.held_blocks > 0
    ray.kill(coordinator, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            after = ray.get(ray.get_actor(coordinator_name(config), namespace="tierload").stats.remote(), timeout=10)
            if after.incarnation != before.incarnation and after.held_blocks == before.held_blocks:
                break
        except Exception:  # noqa: BLE001 - restarting
            pass
        assert time.monotonic() < deadline, "the node never resent its residency to the restarted coordinator"
        time.sleep(0.5)
    assert after.warm.blocks == 30  # rebuilt from the warm store
    dataset.set_epoch(1)
    assert sorted(indices(dataset)) == list(range(30))
    assert dataset.epoch_stats(1)["cold_bytes"] == 0


def test_b05_forking_workers_while_another_thread_talks_to_the_cache(s3, bucket, tier_config, make_dataset):
    """B05: DataLoader workers forked while another thread of the parent is inside a call to the
    node cache must not inherit that call's lock (they would wait on it forever)."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=200)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(), layout="files", batch_size=4)
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            dataset.cache_stats()

    thread = threading.Thread(target=monitor, daemon=True)
    thread.start()
    try:
        for epoch in range(4):
            dataset.set_epoch(epoch)
            assert sorted(indices(dataset, num_workers=2, timeout=60)) == list(range(40))
    finally:
        stop.set()
        thread.join(10)
