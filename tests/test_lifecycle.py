"""The node cache's lifecycle (issue 21 item 5): its transitions written once, the rules that
read an observation, and the one way to find a running cache; all without Ray."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from tierload.deploy.lifecycle import (
    TRANSITIONS,
    CacheState,
    Decision,
    LifecycleError,
    NodeCacheLifecycle,
    Observation,
    decide,
)
from tierload.wire.endpoint import publish_endpoint, running_endpoint
from tierload.wire.messages import Endpoint

S = CacheState


def test_every_state_has_its_transitions_and_stopped_is_terminal():
    assert set(TRANSITIONS) == set(CacheState)
    assert TRANSITIONS[S.STOPPED] == frozenset()
    for state in CacheState:
        if state is not S.STOPPED:
            assert S.STOPPED in TRANSITIONS[state], f"{state} cannot be stopped on purpose"
    # Nothing reaches OWNED or JOINED but a start or a re-creation.
    into_running = {a for a, targets in TRANSITIONS.items() if targets & {S.OWNED, S.JOINED}}
    assert into_running == {S.STARTING, S.RECREATING}


@pytest.mark.parametrize("start, to", [(a, b) for a, b in itertools.product(CacheState, CacheState)
                                       if a is not b and b not in TRANSITIONS[a]])
def test_an_illegal_move_is_refused_and_names_both_states(start, to):
    lifecycle = NodeCacheLifecycle("/hot")
    lifecycle._state = start
    with pytest.raises(LifecycleError, match=f"from {start.value} to {to.value}"):
        lifecycle.move(to, "test")
    assert lifecycle.state is start


def test_a_job_that_loses_its_cache_twice_and_takes_over_then_stops():
    lifecycle = NodeCacheLifecycle("/hot")
    walk = [S.STARTING, S.OWNED, S.LOST, S.RECREATING, S.LOST, S.RECREATING, S.JOINED, S.LOST, S.RECREATING,
            S.OWNED]
    for state in walk:
        lifecycle.move(state, "test")
    lifecycle.stop("tierload stop")
    lifecycle.stop("stopping twice is no error")
    assert lifecycle.stopped and [state for state, _ in lifecycle.history] == [S.ABSENT, *walk, S.STOPPED]
    with pytest.raises(LifecycleError):
        lifecycle.move(S.RECREATING, "nothing comes back from a stop on purpose")


def test_a_refused_job_may_start_again_once_the_directory_is_free():
    lifecycle = NodeCacheLifecycle("/hot")
    for state in (S.STARTING, S.REFUSED, S.STARTING, S.OWNED):
        lifecycle.move(state, "test")
    assert lifecycle.state is S.OWNED


@pytest.mark.parametrize("runs, withdrawn, connected, had_ray, expected", [
    (True, False, True, True, Decision.KEEP),        # the cache runs
    (True, False, False, False, Decision.KEEP),      # a joined job's cache runs
    (False, False, False, True, Decision.STOP),      # ray.shutdown(): its cache went with it
    (False, True, False, True, Decision.STOP),       # the same, the endpoint withdrawn at close
    (False, True, True, True, Decision.KEEP),        # tierload stop: closed on purpose, start nothing
    (False, False, True, True, Decision.RECREATE),   # killed for good (ray.kill): its file names a dead pid
    (False, True, False, False, Decision.RECREATE),  # the job it joined ended: take the directory over
    (False, False, False, False, Decision.RECREATE), # the owner crashed while this job had joined it
])
def test_what_an_observation_means(runs, withdrawn, connected, had_ray, expected):
    assert decide(Observation(runs, withdrawn, connected, had_ray)) is expected


def test_a_shutdown_on_purpose_is_never_taken_for_a_loss():
    for runs, withdrawn in itertools.product((False,), (False, True)):
        assert decide(Observation(runs, withdrawn, ray_connected=False, had_ray=True)) is Decision.STOP


def test_the_one_way_to_find_a_running_cache(tmp_path):
    hot = tmp_path / "hot"
    hot.mkdir(mode=0o700)
    assert running_endpoint(hot) is None  # nothing published
    mine = Endpoint(str(hot / "cache.sock"), b"k" * 32, "node", (str(hot),), os.getpid())
    publish_endpoint(hot, mine)
    assert running_endpoint(hot) == mine
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    publish_endpoint(hot, Endpoint(str(hot / "cache.sock"), b"k" * 32, "node", (str(hot),), ended.pid))
    assert running_endpoint(hot) is None  # its process is gone
