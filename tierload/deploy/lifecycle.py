"""The node cache's lifecycle as a process that reads through it sees it: one state machine.

A job's view of its node's cache moves through these states, and only along the transitions
in :data:`TRANSITIONS`, written here once::

    ABSENT ──start──> STARTING ──> OWNED    (the cache runs in this process's Ray, or its service host's)
                          │   └──> JOINED   (another job's cache, reached through its endpoint only)
                          └──────> REFUSED  (another job with other settings owns the directory)
    OWNED / JOINED ──its process is gone──> LOST ──> RECREATING ──> OWNED / JOINED
                                                          └──(failed: try again later)──> LOST
    any state ──tierload stop, ray.shutdown(), the service host stopped, exit, a signal──> STOPPED (terminal)

What each observation means is decided by one pure function, :func:`decide`: the keeper
(:mod:`tierload.deploy.keeper`) observes, asks :func:`decide`, and acts. A shutdown on purpose
is never taken for a loss: once this process had Ray and Ray is gone, the cache is STOPPED and
nothing starts Ray again behind the user. Finding a running cache has one way,
:func:`tierload.wire.endpoint.running_endpoint`.

Nothing here imports Ray: the machine is tested without a cluster.
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass

from tierload.errors import ServiceError

log = logging.getLogger(__name__)


class CacheState(enum.Enum):
    """Where this process stands with its node's cache."""

    ABSENT = "absent"
    STARTING = "starting"
    OWNED = "owned"
    JOINED = "joined"
    REFUSED = "refused"
    LOST = "lost"
    RECREATING = "re-creating"
    STOPPED = "stopped"


_S = CacheState
TRANSITIONS: dict[CacheState, frozenset[CacheState]] = {
    _S.ABSENT: frozenset({_S.STARTING, _S.STOPPED}),
    _S.STARTING: frozenset({_S.OWNED, _S.JOINED, _S.REFUSED, _S.ABSENT, _S.STOPPED}),  # ABSENT: the start failed
    _S.OWNED: frozenset({_S.LOST, _S.STOPPED}),
    _S.JOINED: frozenset({_S.LOST, _S.STOPPED}),
    _S.REFUSED: frozenset({_S.STARTING, _S.STOPPED}),
    _S.LOST: frozenset({_S.RECREATING, _S.STOPPED}),
    _S.RECREATING: frozenset({_S.OWNED, _S.JOINED, _S.REFUSED, _S.LOST, _S.STOPPED}),
    _S.STOPPED: frozenset(),
}
"""The legal transitions: ``TRANSITIONS[a]`` holds every state ``a`` may move to."""


class LifecycleError(ServiceError):
    """A transition the node cache's lifecycle does not allow (a bug in the caller, never a user error)."""


class Decision(enum.Enum):
    """What the keeper does after one observation."""

    KEEP = "keep"            # the cache runs, or nothing is to be started: look again later
    RECREATE = "re-create"   # its process is gone, not on purpose: find or start it again
    STOP = "stop"            # stopped on purpose: end, and never start Ray or the cache again


@dataclass(frozen=True)
class Observation:
    """One look at the node's cache from this process.

    Attributes:
        cache_runs: An endpoint is published and its process runs.
        endpoint_withdrawn: No endpoint is published (a cache closed on purpose withdraws it).
        ray_connected: This process is connected to Ray now, itself or through its service host
            (:mod:`tierload.deploy.host`).
        had_ray: This process was connected to Ray itself while it read through the cache, or the
            service host its cache ran in was ended on purpose (Ray shut down on purpose either way).
    """

    cache_runs: bool
    endpoint_withdrawn: bool
    ray_connected: bool
    had_ray: bool


def decide(seen: Observation) -> Decision:
    """What an observation means (pure; the one place these rules live).

    - The cache runs: keep.
    - This process had Ray and has it no more: Ray was shut down on purpose (``ray.shutdown()``,
      the end of the script, a signal) and the cache went with it: stop.
    - No endpoint while Ray is here: the cache was closed on purpose (``tierload stop``): keep
      looking, start nothing.
    - Otherwise the cache's process is gone (killed, crashed, or the job it belonged to ended):
      re-create it (join whoever owns the directory now, or start it; a job without Ray of its own
      starts a service host, and with it a local Ray, to take the directory over).
    """
    if seen.cache_runs:
        return Decision.KEEP
    if seen.had_ray and not seen.ray_connected:
        return Decision.STOP
    if seen.endpoint_withdrawn and seen.ray_connected:
        return Decision.KEEP
    return Decision.RECREATE


class NodeCacheLifecycle:
    """This process's state with one deployment's node cache; every move checked against :data:`TRANSITIONS`.

    Thread-safe: the dataset moves it at start, the keeper's thread afterwards.

    Args:
        where: Named in logs and errors (e.g. the hot directory).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self._state = CacheState.ABSENT
        self._lock = threading.Lock()
        self.history: list[tuple[CacheState, str]] = [(CacheState.ABSENT, "created")]

    @property
    def state(self) -> CacheState:
        return self._state

    @property
    def stopped(self) -> bool:
        """Stopped on purpose: nothing may start the cache (or Ray) again from this process."""
        return self._state is CacheState.STOPPED

    def move(self, to: CacheState, why: str) -> None:
        """Move to ``to``.

        Raises:
            LifecycleError: ``to`` is not reachable from the current state.
        """
        with self._lock:
            self._move(to, why)

    def move_unless_stopped(self, to: CacheState, why: str) -> bool:
        """Move to ``to`` unless the cache was stopped on purpose meanwhile (another thread's
        stop wins over a re-creation that was running); whether it moved.

        Raises:
            LifecycleError: ``to`` is not reachable from the current state.
        """
        with self._lock:
            if self._state is CacheState.STOPPED:
                return False
            self._move(to, why)
            return True

    def _move(self, to: CacheState, why: str) -> None:
        if to is self._state:
            return
        if to not in TRANSITIONS[self._state]:
            raise LifecycleError(f"the node cache for {self.where} cannot go from {self._state.value} to "
                                 f"{to.value} ({why})")
        log.debug("node cache for %s: %s -> %s (%s)", self.where, self._state.value, to.value, why)
        self._state = to
        self.history.append((to, why))

    def stop(self, why: str) -> None:
        """Stopped on purpose, from any state (stopping twice is no error)."""
        self.move(CacheState.STOPPED, why)
