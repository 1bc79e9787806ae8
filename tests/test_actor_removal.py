"""Actors removed for good (``ray.kill``, not a crash Ray restarts): issue 12 item 4, case B25.

A real local Ray, real tier directories and the local S3 server (moto over HTTP). The killed
actor is created again with the same configuration, rebuilds its state from the tiers on disk,
and the epoch (and the next) yields every sample exactly once. Warnings stay few.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from helpers import actor_log_lines, index_of, land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.node.coordinator_sync import CoordinatorSync


def collect_raw(batch):
    return [item[0] for item in batch]


def epoch_indices(dataset, epoch: int, num_workers: int = 0, on_batch=None) -> list[int]:
    dataset.set_epoch(epoch)
    seen: list[int] = []
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers, collate_fn=collect_raw)
    for batch_index, samples in enumerate(loader):
        seen.extend(index_of(s) for s in samples)
        if on_batch is not None:
            on_batch(batch_index)
    return seen


def tierload_warnings(caplog) -> int:
    return sum(record.levelno >= logging.WARNING and record.name.startswith("tierload") for record in caplog.records)


def node_cache_handle(config):
    import ray

    from tierload.deploy.actors import node_cache_name

    node_id = ray.get_runtime_context().get_node_id()
    return ray.get_actor(node_cache_name(config, node_id), namespace=config.ray.namespace)


def test_a_coordinator_killed_for_good_mid_epoch_is_created_again(s3, bucket, tier_config, make_dataset):
    """Case F04: a coordinator removed with ray.kill mid-epoch is created again by the next call"""
    import ray

    from tierload.deploy.actors import coordinator_name

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=1000)
    config = tier_config(hot="12KiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", batch_size=2)
    assert sorted(epoch_indices(dataset, 0)) == list(range(40))
    land_warm_writes(dataset)
    coordinator = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
    before = ray.get(coordinator.stats.remote())
    assert before.warm.blocks == 40

    def kill(batch_index: int) -> None:
        if batch_index == 3:
            ray.kill(coordinator)  # no_restart: removed for good, its name is free

    started = time.monotonic()
    assert sorted(epoch_indices(dataset, 1, on_batch=kill)) == list(range(40))
    deadline = time.monotonic() + 60
    while True:  # the node cache's next sync creates it again
        try:
            after = ray.get(ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
                            .stats.remote(), timeout=10)
            if after.incarnation != before.incarnation and after.held_blocks > 0:
                break
        except ValueError:
            pass
        assert time.monotonic() < deadline, "the coordinator was never created again"
        time.sleep(0.5)
    assert after.warm.blocks == 40  # rebuilt from the warm tier on disk
    assert sorted(epoch_indices(dataset, 2)) == list(range(40))
    assert dataset.epoch_stats(2).get("cold_bytes", 0) == 0
    elapsed_min = (time.monotonic() - started) / 60
    pid = dataset.cache_stats()["pid"]
    assert actor_log_lines(pid, "was gone; started it again") == 1  # the node cache's log is the one read
    warnings = actor_log_lines(pid, "with the coordinator failed")
    assert warnings <= 2 + 2 * elapsed_min  # rate-limited: not one per 0.2 s try


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_node_cache_killed_for_good_between_epochs_is_created_again(s3, bucket, tier_config, make_dataset,
                                                                      num_workers, caplog):
    """Case F04: a node cache removed with ray.kill between epochs is created again; its hot tier adopted"""
    caplog.set_level(logging.WARNING, logger="tierload")
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=500)
    config = tier_config()
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", batch_size=2)
    assert sorted(epoch_indices(dataset, 0)) == list(range(30))
    pid = dataset.cache_stats()["pid"]
    import ray

    ray.kill(node_cache_handle(config))
    started = time.monotonic()
    assert sorted(epoch_indices(dataset, 1, num_workers)) == list(range(30))
    assert time.monotonic() - started < 25  # not the 30 s wait for a cache that never comes back
    stats = dataset.cache_stats()
    assert stats["pid"] != pid and stats["levels"][0]["blocks"] == 30  # the hot tier on disk adopted
    assert sorted(epoch_indices(dataset, 2, num_workers)) == list(range(30))
    assert dataset.epoch_stats(2).get("cold_gets", 0) == 0
    assert tierload_warnings(caplog) == 2  # "runs again", "reconnected"


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_node_cache_killed_for_good_mid_epoch_is_created_again(s3, bucket, tier_config, make_dataset,
                                                                 num_workers, caplog):
    """Case F04: a node cache removed with ray.kill mid-epoch is created again; the epoch finishes exactly once"""
    caplog.set_level(logging.WARNING, logger="tierload")
    import ray

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 60, size=500)
    config = tier_config(prefetch={"depth_blocks": 2})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", batch_size=2)
    pid = dataset.cache_stats()["pid"]
    handle = node_cache_handle(config)

    def kill(batch_index: int) -> None:
        if batch_index == 5:
            ray.kill(handle)
        time.sleep(0.02)

    started = time.monotonic()
    assert sorted(epoch_indices(dataset, 0, num_workers, on_batch=kill)) == list(range(60))
    assert time.monotonic() - started < 120
    assert dataset.cache_stats()["pid"] != pid
    assert sorted(epoch_indices(dataset, 1, num_workers)) == list(range(60))
    assert 1 <= tierload_warnings(caplog) <= 4  # once per event, not once per block or per try


def test_a_failing_sync_is_logged_a_few_times_not_once_per_try(caplog):
    """The sync loop tries every interval; a coordinator that stays away costs one warning a minute."""
    tries = threading.Event()
    calls = []

    def coordinator_away(method, *args):
        calls.append(method)
        if len(calls) >= 50:
            tries.set()
        raise ConnectionError("coordinator unreachable")

    sync = CoordinatorSync("node-a", coordinator_away, lambda full: ({}, [], [], [] if full else None),
                           lambda: 0.0, interval_s=0.005)
    with caplog.at_level(logging.WARNING, logger="tierload.node.coordinator_sync"):
        sync.start()
        assert tries.wait(30)
        sync._stop.set()
        sync._thread.join(5)
    warnings = [r for r in caplog.records if r.name == "tierload.node.coordinator_sync"]
    assert len(calls) >= 50 and len(warnings) == 1
    assert sync.stats["sync_errors"] == len(calls)


def test_the_keeper_leaves_a_live_cache_alone_and_stops_with_the_deployment(s3, bucket, tier_config, make_dataset,
                                                                           tmp_path):
    from tierload.deploy.keeper import keep_node_cache
    from tierload.deploy.runtime import stop_actors
    from tierload.wire.endpoint import ENDPOINT_FILE

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 4, size=100)
    config = tier_config()
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    pid = dataset.cache_stats()["pid"]
    keeper = keep_node_cache(config, dataset._endpoint.hot_dirs[-1], dataset)
    (tmp_path / "hot" / ENDPOINT_FILE).unlink()  # the file is gone, the cache is not
    assert keeper.check() and keeper.recreated == 0
    assert dataset.cache_stats()["pid"] == pid
    stop_actors(config)  # on purpose: the keeper must not bring it back
    time.sleep(3)
    with pytest.raises(ValueError):
        node_cache_handle(config)
    assert keeper.recreated == 0 and not keeper._thread.is_alive()
