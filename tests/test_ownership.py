"""One owner per hot directory (issue 13, item 1): the lock, the refusal, the stale takeover.

Real node caches on real directories, and real processes killed with SIGKILL; no Ray here
(tests/test_joining.py runs two jobs with their own local Ray).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tierload.config.loading import load_config
from tierload.errors import ServiceError, TierInUseError
from tierload.node.node_cache import NodeCache
from tierload.node.ownership import OWNER_FILE, check_compatible, live_owner, sharing_terms
from tierload.wire.endpoint import read_endpoint


def _config(hot, capacity=2**20, **sections):
    return load_config({"hot": {"dir": str(hot), "capacity_bytes": capacity}, "warm": {"url": None}, **sections})


@pytest.fixture
def impatient(monkeypatch):
    """A refused start gives up after 0.2 s instead of ownership's 5 s of patience (which exists
    for an owner still exiting; these tests' owners are alive, so the refusal is the same)."""
    from tierload.node import ownership

    monkeypatch.setattr(ownership, "ACQUIRE_PATIENCE_S", 0.2)


@pytest.fixture
def started():
    caches = []

    def start(config, node_id="n1"):
        cache = NodeCache(config, node_id=node_id).start()
        caches.append(cache)
        return cache

    yield start
    for cache in caches:
        cache.close()


def test_a_second_cache_on_an_owned_directory_is_refused_with_the_owner_and_each_difference(tmp_path, started, impatient):
    """Case B39: one owner per hot dir: a second cache with other settings is refused, naming the owner and each
    difference"""
    hot = tmp_path / "hot"
    started(_config(hot))
    owner = live_owner(str(hot))
    assert owner is not None and owner.pid == os.getpid()

    with pytest.raises(TierInUseError) as refused:
        NodeCache(_config(hot, capacity=2**21, policy={"hot": {"eviction": "lru"}}), node_id="n2").start()
    text = str(refused.value)
    assert f"pid {os.getpid()}" in text and str(hot) in text
    assert "hot.capacity_bytes: owner 1048576, this job 2097152" in text
    assert "policy.hot.eviction: owner 'clairvoyant', this job 'lru'" in text
    assert "tierload stop" in text  # how to stop the owner
    assert isinstance(refused.value, ServiceError)
    # The refused cache changed nothing: the owner's endpoint and record stand.
    assert read_endpoint(str(hot)).pid == os.getpid() and live_owner(str(hot)) == owner


def test_another_spelling_of_the_same_directory_is_the_same_owner(tmp_path, started, impatient):
    hot = tmp_path / "hot"
    hot.mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(hot)
    started(_config(hot))
    with pytest.raises(TierInUseError, match="same configuration"):
        NodeCache(_config(alias), node_id="n2").start()
    owner = live_owner(str(alias))
    assert owner is not None
    check_compatible(owner, _config(alias), str(alias))  # a job may join it through either path
    assert sharing_terms(_config(alias), str(alias)) == sharing_terms(_config(hot), str(hot))


def test_a_closed_cache_releases_the_directory_for_the_next_owner(tmp_path, started):
    hot = tmp_path / "hot"
    first = NodeCache(_config(hot), node_id="n1").start()
    first.close()
    assert live_owner(str(hot)) is None
    started(_config(hot, capacity=2**21))  # a new owner may even bring another configuration
    assert live_owner(str(hot)).terms["hot"]["capacity_bytes"] == 2**21


_OWNER_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from tierload.node.node_cache import NodeCache
    from tierload.config.loading import load_config
    from tierload.stores.local import LocalDirStore
    from tierload.frames.blockfile import encode_frame
    hot = sys.argv[1]
    cache = NodeCache(load_config({"hot": {"dir": hot, "capacity_bytes": 2**20}, "warm": {"url": None}}),
                      node_id="dead").start()
    LocalDirStore(hot).write("left-" + "a" * 32, encode_frame("left-" + "a" * 32, b"x" * 100))
    print("owning", flush=True)
    time.sleep(600)
""")


def test_a_killed_owner_is_taken_over_with_its_complete_blocks_adopted(tmp_path, started, caplog, impatient):
    """Case B12: a dead owner's lock is detected and taken over; its complete blocks are reused"""
    hot = tmp_path / "hot"
    owner = subprocess.Popen([sys.executable, "-c", _OWNER_SCRIPT, str(hot)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "owning"
        assert live_owner(str(hot)).pid == owner.pid
        with pytest.raises(TierInUseError, match=f"pid {owner.pid}"):
            NodeCache(_config(hot), node_id="n1").start()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert live_owner(str(hot)) is None  # the kernel released the dead process's lock
    assert read_endpoint(str(hot)).pid == owner.pid  # its endpoint file is stale

    with caplog.at_level("WARNING", logger="tierload.node.ownership"):
        cache = started(_config(hot))
    assert f"previous owner (pid {owner.pid}" in caplog.text
    assert read_endpoint(str(hot)).pid == os.getpid()
    assert live_owner(str(hot)).pid == os.getpid()
    assert cache.stats().levels[-1].blocks == 1  # the dead owner's block, adopted
    assert (hot / OWNER_FILE).stat().st_mode & 0o077 == 0


def test_a_policy_changed_at_run_time_is_what_joiners_must_bring(tmp_path, started):
    hot = tmp_path / "hot"
    cache = started(_config(hot))
    before = live_owner(str(hot))
    cache.set_policy({"hot": {"eviction": "lru"}})
    after = live_owner(str(hot))
    assert after.started_at == before.started_at and after.terms["policy"]["hot"]["eviction"] == "lru"
    check_compatible(after, _config(hot, policy={"hot": {"eviction": "lru"}}), str(hot))
    with pytest.raises(TierInUseError, match="policy.hot.eviction: owner 'lru', this job 'clairvoyant'"):
        check_compatible(after, _config(hot), str(hot))
