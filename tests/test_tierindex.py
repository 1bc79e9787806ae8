"""Residency and capacity accounting under every policy (pure, no I/O)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tierload.policies.clairvoyant import NEVER
from tierload.policies.counts import AccessCounts
from tierload.policies.frequency import DecayingCounter
from tierload.policies.registry import make_policy
from tierload.policies.tierindex import Residency, TierIndex


class FixedOracle:
    def __init__(self, distance):
        self.distance = distance

    def distances(self, keys):
        return np.array([self.distance.get(k, NEVER) for k in keys], dtype=np.int64)


def make_index(name, capacity, oracle=None):
    counter = DecayingCounter(4.0)
    return TierIndex("t", capacity, make_policy(name, counter=counter, oracle=oracle or FixedOracle({})),
                     AccessCounts(counter))


@pytest.mark.parametrize("policy", ["lru", "lfu", "keep", "clairvoyant"])
def test_capacity_is_never_exceeded_under_churn(policy):
    rng = random.Random(1)
    oracle = FixedOracle({})
    index = make_index(policy, 10_000, oracle)
    for step in range(5000):
        key = rng.randrange(300)
        size = rng.randrange(1, 1500)
        oracle.distance = {k: rng.randrange(1000) for k in list(index.resident)[:50]}
        index.record_access(key, step / 1000)
        if rng.random() < 0.1:
            index.pins.pin(key)
        admission = index.reserve(key, size, step / 1000)
        if admission.admitted:
            if rng.random() < 0.1:
                index.abort(key)
            else:
                index.commit(key, step / 1000)
        if rng.random() < 0.1 and index.pins:
            index.pins.unpin(next(iter(index.pins)))
        assert index.used_bytes == sum(index.resident.values()) + sum(index.reserved.values())
        assert index.used_bytes <= index.capacity_bytes
        assert not any(index.pins.is_pinned(v) for v in admission.victims)


def test_state_machine_transitions():
    index = make_index("lru", 100)
    index.record_access("a", 0)
    assert index.state("a") is Residency.ABSENT
    assert index.reserve("a", 60, 0).admitted
    assert index.state("a") is Residency.RESERVED and "a" not in index
    assert not index.reserve("a", 60, 0).admitted  # no double reservation
    index.commit("a", 0)
    assert index.state("a") is Residency.RESIDENT and "a" in index
    assert index.remove("a") and index.state("a") is Residency.ABSENT and index.used_bytes == 0


def test_blocks_larger_than_the_tier_and_below_the_count_threshold_are_refused():
    counter = DecayingCounter(2.0)
    index = TierIndex("t", 100, make_policy("lru", counter=counter), AccessCounts(counter), admit_min_count=2)
    counter.add("a", 0)
    assert not index.reserve("a", 10, 0).admitted  # one access, threshold two
    counter.add("a", 0)
    assert index.reserve("a", 10, 0).admitted
    counter.add("big", 0), counter.add("big", 0)
    assert "exceeds" in index.reserve("big", 101, 0).reason


def test_keep_refuses_once_full_and_lru_evicts_the_oldest():
    keep = make_index("keep", 20)
    lru = make_index("lru", 20)
    for index in (keep, lru):
        for i, key in enumerate("abc"):
            index.record_access(key, i)
            if index.reserve(key, 10, i).admitted:
                index.commit(key, i)
    assert set(keep.resident) == {"a", "b"}
    assert set(lru.resident) == {"b", "c"}


def test_clairvoyant_evicts_the_furthest_and_bypasses_a_later_newcomer():
    oracle = FixedOracle({"a": 5, "b": 50})
    index = make_index("clairvoyant", 20, oracle)
    for key in "ab":
        index.record_access(key, 0)
        index.reserve(key, 10, 0)
        index.commit(key, 0)
    oracle.distance["c"] = 10
    index.record_access("c", 0)
    admission = index.reserve("c", 10, 0)
    assert admission.admitted and admission.victims == ["b"]
    index.commit("c", 0)
    oracle.distance["d"] = 100  # needed after everything resident: not admitted
    index.record_access("d", 0)
    assert not index.reserve("d", 10, 0).admitted


def test_lfu_keeps_equally_frequent_residents_and_admits_a_more_frequent_newcomer():
    index = make_index("lfu", 20)
    for key in "ab":
        index.record_access(key, 0)
        index.reserve(key, 10, 0)
        index.commit(key, 0)
    index.record_access("c", 0)
    assert not index.reserve("c", 10, 0).admitted  # as frequent as the residents: keep them
    for _ in range(3):
        index.record_access("c", 0)
    admission = index.reserve("c", 10, 0)
    assert admission.admitted and len(admission.victims) == 1


def test_decaying_counter_halves_per_half_life():
    counter = DecayingCounter(2.0)
    counter.add("k", 0)
    assert counter.count("k", 2.0) == pytest.approx(0.5)
    assert counter.at_last_access("k") == 1.0
    counter.add("k", 2.0)
    assert counter.count("k", 2.0) == pytest.approx(1.5)
    assert counter.score("k") > counter.score("never")
