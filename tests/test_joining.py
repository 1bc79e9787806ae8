"""Several jobs on one node cache (issue 13, items 1 and 2), as users run them: separate
training processes, each able to start its own local Ray, with the same hot and warm tiers.

The first job to start owns the hot directory (its node cache holds the lock); a later job
with the same tier configuration joins that cache through its published endpoint and local
channel (and starts no Ray at all); a job with another configuration is refused, naming the
owner. Checked here with real processes, a real Ray, moto's S3 server and real directories:
every sample of every epoch once with the right bytes, the tiers never above their capacity,
no integrity failure (the caches no longer evict each other's blocks), and the joiner ends its
epoch, then takes the directory over, when the owner's process exits under it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import put_indexed_objects, tier_bytes

from tierload.errors import TierInUseError
from tierload.node.ownership import live_owner

JOB = str(Path(__file__).with_name("tierload_job.py"))
OBJECTS, SIZE = 100, 20_000
HOT, WARM = 1_000_000, 1_500_000


class PeakUsage:
    """The largest byte count a tier directory showed while running (consistent walks only)."""

    def __init__(self, *paths: Path) -> None:
        self.paths = paths
        self.peaks = {path: 0 for path in paths}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.02):
            for path in self.paths:
                first = tier_bytes(path) if path.exists() else 0
                if first == (tier_bytes(path) if path.exists() else 0):  # unchanged between two walks
                    self.peaks[path] = max(self.peaks[path], first)

    def stop(self) -> dict[Path, int]:
        self._stop.set()
        self._thread.join()
        return self.peaks


class Job:
    """A job process (tests/tierload_job.py) and the events it printed."""

    def __init__(self, tmp_path: Path, name: str, spec: dict) -> None:
        self.result_path = tmp_path / f"{name}.json"
        self.exit_path = tmp_path / f"{name}.exit"
        self.log_path = tmp_path / f"{name}.log"
        spec = {**spec, "result": str(self.result_path), "exit_when": str(self.exit_path)}
        root = str(Path(__file__).parent.parent)  # this checkout's tierload, whatever is installed
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen([sys.executable, JOB, json.dumps(spec)], stdout=subprocess.PIPE,
                                            stderr=log, text=True, cwd=root, env=env)

    def wait_for(self, event: str, timeout_s: float = 240.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"the job ended (rc {self.process.wait()}) before {event!r}:\n"
                                     f"{self.log_path.read_text()[-3000:]}")
            if line.startswith("{"):
                message = json.loads(line)
                if message["event"] == event:
                    return message
        raise AssertionError(f"no {event!r} within {timeout_s}s")

    def result(self) -> dict:
        return json.loads(self.result_path.read_text())

    def finish(self, timeout_s: float = 120.0) -> int:
        self.exit_path.touch()
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def jobs():
    started: list[Job] = []
    yield started
    for job in started:
        job.kill()


def _config(tmp_path: Path, **sections) -> dict:
    data = {"hot": {"dir": str(tmp_path / "hot"), "capacity_bytes": HOT},
            "warm": {"url": str(tmp_path / "warm"), "capacity_bytes": WARM},
            "prefetch": {"depth_blocks": 8},
            "manifest": {"cache_dir": str(tmp_path / "manifests"), "pack_target_bytes": 0},
            "ray": {"num_cpus": 2}}
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return data


def _spec(s3, url: str, config: dict, **fields) -> dict:
    return {"url": url, "storage_options": s3.storage_options, "config": config, "epochs": 2, "seed": 0,
            "num_workers": 0, "delay_s": 0.0, "sample_size": SIZE, **fields}


def _assert_every_sample_once(result: dict) -> None:
    assert result["wrong_bytes"] == 0
    for epoch in result["epochs"]:
        assert sorted(epoch["seen"]) == list(range(OBJECTS))


def test_two_jobs_with_their_own_ray_share_one_node_cache_within_capacity(s3, bucket, tmp_path, jobs):
    """Case B39: two jobs, each able to start its own Ray, one hot and one warm dir, capacities below the data, 4
    epochs: every sample right in both, the tiers never above their capacities; the second job joins, a third with
    other capacities is refused"""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=SIZE)
    url, config = f"s3://{name}/ds", _config(tmp_path)
    peaks = PeakUsage(tmp_path / "hot", tmp_path / "warm")

    owner = Job(tmp_path, "owner", _spec(s3, url, config, seed=1, epochs=4))
    jobs.append(owner)
    started = owner.wait_for("started")
    assert started["ray"] and started["cache_pid"] != started["pid"]  # its own Ray, its cache actor
    assert not started["ray_imported"]  # both in its service host

    # A third job whose capacities differ is refused before it starts anything, told who owns the tier.
    from tierload.loader.dataset import TieredDataset

    with pytest.raises(TierInUseError) as refused:
        TieredDataset(url, _config(tmp_path, hot={"capacity_bytes": 2 * HOT}), layout="files",
                      storage_options=s3.storage_options)
    assert f"pid {started['cache_pid']}" in str(refused.value)
    assert f"hot.capacity_bytes: owner {HOT}, this job {2 * HOT}" in str(refused.value)

    joiner = Job(tmp_path, "joiner", _spec(s3, url, config, seed=2, num_workers=1, delay_s=0.002, epochs=4))
    jobs.append(joiner)
    joined = joiner.wait_for("started")
    assert joined["cache_pid"] == started["cache_pid"]  # the owner's node cache
    assert not joined["ray"]  # a joiner starts no Ray of its own
    joiner.wait_for("done")
    owner.wait_for("done")
    hot_peak, warm_peak = peaks.stop().values()
    results = [owner.result(), joiner.result()]
    assert joiner.finish() == 0 and owner.finish() == 0

    for result in results:
        _assert_every_sample_once(result)
        assert result["integrity_failures"] == 0
    assert 0 < hot_peak <= HOT and 0 < warm_peak <= WARM
    cold = [sum(epoch["stats"].get("cold_bytes", 0) for epoch in result["epochs"]) for result in results]
    print(f"hot peak {hot_peak}/{HOT} B, warm peak {warm_peak}/{WARM} B, cold bytes owner {cold[0]}, "
          f"joiner {cold[1]}, dataset {OBJECTS * SIZE}")


def test_a_joiner_finishes_its_epoch_and_takes_over_when_the_owner_exits(s3, bucket, tmp_path, jobs):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=SIZE)
    url, config = f"s3://{name}/ds", _config(tmp_path)

    owner = Job(tmp_path, "owner", _spec(s3, url, config, epochs=1))
    jobs.append(owner)
    started = owner.wait_for("started")
    joiner = Job(tmp_path, "joiner", _spec(s3, url, config, seed=2, num_workers=1, delay_s=0.05))
    jobs.append(joiner)
    assert joiner.wait_for("started")["cache_pid"] == started["cache_pid"]
    owner.wait_for("done")
    assert owner.finish() == 0  # the owner's process ends, its local Ray and node cache with it
    deadline = time.monotonic() + 60
    while (current := live_owner(str(tmp_path / "hot"))) is not None and current.pid == started["cache_pid"]:
        assert time.monotonic() < deadline, "the owner's node cache outlived its job"
        time.sleep(0.2)

    joiner.wait_for("done", timeout_s=300)
    result = joiner.result()
    _assert_every_sample_once(result)
    assert result["start_pid"] == started["cache_pid"]
    # The second epoch ran on the node cache the joiner started for itself in its own Ray (its service host's).
    assert result["ray"] and result["cache_pid"] != started["cache_pid"] and not result["ray_imported"]
    assert live_owner(str(tmp_path / "hot")).pid == result["cache_pid"]
    assert joiner.finish() == 0
    log = joiner.log_path.read_text()
    # The owner went away mid-epoch: the joiner either read blocks itself until its own node
    # cache answered, or (when that cache was up before its next read) reconnected at once.
    assert ("reading blocks directly until it is back" in log
            or ("was gone; it runs again" in log and "reconnected to the node cache" in log)), log
    # The owner's job closed its cache at exit (socket and endpoint withdrawn, lock released):
    # the joiner's keeper started the cache that owns the directory now.
    assert f"was gone; it runs again (pid {result['cache_pid']}) with the same configuration" in log


@pytest.mark.slow
def test_a_slow_joiner_keeps_its_hit_ratio_beside_a_fast_owner(s3, bucket, tmp_path, jobs):
    """Item 2, live: the slow job's hot hit ratio after its first epoch, alone and beside a fast
    job streaming a dataset eight times its own through the same node cache."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/small", 24, size=SIZE)
    put_indexed_objects(fs, f"{name}/large", 200, size=SIZE)
    small, large = f"s3://{name}/small", f"s3://{name}/large"

    def hit_ratio(result: dict) -> float:
        later = [epoch["stats"] for epoch in result["epochs"][1:]]
        return sum(s.get("hot_hits", 0) for s in later) / sum(s["accesses"] for s in later)

    def cold_bytes(result: dict) -> int:
        return sum(epoch["stats"].get("cold_bytes", 0) for epoch in result["epochs"])

    slow = {"epochs": 3, "delay_s": 0.05, "num_workers": 1, "sample_size": SIZE}
    alone = Job(tmp_path, "alone", _spec(s3, small, _config(tmp_path / "a", warm={"url": None}), **slow))
    jobs.append(alone)
    alone.wait_for("done")
    alone_result = alone.result()
    assert alone.finish() == 0

    config = _config(tmp_path / "b", warm={"url": None})
    peaks = PeakUsage(tmp_path / "b" / "hot")
    fast = Job(tmp_path, "fast", _spec(s3, large, config, epochs=6))
    jobs.append(fast)
    fast.wait_for("started")
    joiner = Job(tmp_path, "slow", _spec(s3, small, config, **slow))
    jobs.append(joiner)
    joiner.wait_for("done")
    together = joiner.result()
    fast.wait_for("done", timeout_s=600)
    (hot_peak,) = peaks.stop().values()
    fast_result = fast.result()
    assert joiner.finish() == 0 and fast.finish() == 0
    for result in (alone_result, together):
        assert result["wrong_bytes"] == 0
        assert all(sorted(epoch["seen"]) == list(range(24)) for epoch in result["epochs"])
    assert hot_peak <= HOT
    print(f"slow job hot hit ratio after epoch 0: alone {hit_ratio(alone_result):.3f}, beside the fast job "
          f"{hit_ratio(together):.3f}; fast job {hit_ratio(fast_result):.3f}; hot peak {hot_peak}/{HOT} B; "
          f"cold bytes slow alone {cold_bytes(alone_result)}, slow together {cold_bytes(together)}, "
          f"fast {cold_bytes(fast_result)}")
    assert hit_ratio(together) >= 0.9 * hit_ratio(alone_result)


def test_in_one_ray_cluster_a_second_deployment_on_an_owned_directory_is_refused(s3, bucket, tier_config,
                                                                                  make_dataset, tmp_path):
    """``tierload serve`` or a second driver in the same cluster, with another warm tier (so
    another actor name) over the same hot directory: its actor is refused and removed."""
    import ray

    from tierload.deploy.actors import get_node_cache, node_cache_name
    from tierload.deploy.runtime import stop_actors

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 4, size=100)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(), layout="files")
    other = tier_config(warm="2MiB").model_copy(update={"warm": tier_config().warm.model_copy(
        update={"url": str(tmp_path / "other-warm")})})
    try:
        with pytest.raises(TierInUseError) as refused:
            get_node_cache(other)
    finally:
        stop_actors(other)  # its coordinator
    assert f"pid {dataset._endpoint.pid}" in str(refused.value)
    assert "warm.url: owner" in str(refused.value)
    actor = node_cache_name(other, ray.get_runtime_context().get_node_id())
    deadline = time.monotonic() + 30
    while True:  # the refused actor is removed (Ray frees its name shortly after): a later start may succeed
        try:
            ray.get_actor(actor, namespace="tierload")
        except ValueError:
            break
        assert time.monotonic() < deadline, f"the refused actor {actor} was not removed"
        time.sleep(0.2)
    assert live_owner(str(tmp_path / "hot")).pid == dataset._endpoint.pid
