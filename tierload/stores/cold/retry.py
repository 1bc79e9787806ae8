"""The one retry layer of the cold tier: when a failed request is sent again, and when not.

Nothing below tierload retries (botocore is built with one attempt, s3fs with one try), so
every number here counts requests at the endpoint. Two bounds, for two kinds of trouble:

* ``cold.max_attempts`` is the number of requests one read makes for an object that keeps
  failing while the endpoint is otherwise healthy: throttling (``SlowDown``), a body that
  stalls past ``cold.read_timeout_s`` or breaks off, a short body, a 5xx while other requests
  to the same endpoint succeed.
* ``cold.outage_budget_s`` covers the endpoint failing as a whole: connections refused, reset
  or timing out, or 5xx answers, while no request to that endpoint sent after this read's
  first failure has been answered (see :class:`EndpointHealth`). Past ``max_attempts`` such a
  read keeps trying until the budget (seconds since its first failure) is spent, then raises
  one error naming the budget and the last cause. So an outage shorter than the budget costs
  time, not the epoch.

Backoff is capped exponential with full jitter; throttling backs off harder (and
:class:`AdaptiveLimit` lowers the requests in flight). A lone read of one object that answers
5xx cannot be told from an endpoint outage (no other request shows the endpoint alive): it
is retried for the budget too.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections import deque
from collections.abc import Iterable

from tierload.errors import EndpointUnreachableError, TierloadError, TransientBackendError

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 2.0
# Throttling asks the client to send less: eight times the base delay, a higher cap.
THROTTLED_BASE_S = 0.4
THROTTLED_CAP_S = 10.0

_THROTTLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"}
_SERVER_ERROR_CODES = {"InternalError", "ServiceUnavailable", "500", "502", "503", "504"}
# Failures of the connection itself, before any answer: the endpoint is down or unreachable.
_CONNECTION_FAILURES = {"ClientConnectorError", "ConnectionRefusedError", "ServerDisconnectedError",
                        "ConnectionResetError", "ConnectionTimeoutError", "ConnectTimeoutError",
                        "EndpointConnectionError", "gaierror"}


class Failure(enum.Enum):
    """How a failed request is retried."""

    FINAL = "final"            # not retried (not found, changed, denied, ...)
    TRANSIENT = "transient"    # this object: at most max_attempts requests
    THROTTLED = "throttled"    # SlowDown: like TRANSIENT, with harder backoff and fewer in flight
    DOWN = "down"              # the endpoint failing: retried within the outage budget


def classify(error: BaseException, code: str, cause_names: Iterable[str]) -> Failure:
    """The kind of a failed request.

    Args:
        error: The translated tierload error.
        code: The S3 error code of the original exception (empty when none).
        cause_names: Class names of the original exception and its causes.
    """
    if not isinstance(error, (TransientBackendError, EndpointUnreachableError)):
        return Failure.FINAL
    if code in _THROTTLE_CODES:
        return Failure.THROTTLED
    if isinstance(error, EndpointUnreachableError) or code in _SERVER_ERROR_CODES:
        return Failure.DOWN
    if set(cause_names) & _CONNECTION_FAILURES:
        return Failure.DOWN
    return Failure.TRANSIENT


class EndpointHealth:
    """When each endpoint last answered a request, by when that request was sent (``time.monotonic()``).

    The send time, not the answer's arrival, tells whether the endpoint was alive after a
    failure: a request sent before an outage may still be answered just after it began (its
    answer already on the wire), which proves nothing about the endpoint since. CI on
    2026-12-03 lost an epoch that way (``test_an_epoch_survives_a_10s_outage``): a read gave up
    at ``cold.max_attempts`` 3 ms into the outage, because an answer to an earlier request
    arrived in between.
    """

    def __init__(self) -> None:
        self._answered_sent_at: dict[str, float] = {}

    def answered(self, endpoint: str, sent_at: float) -> None:
        """Record that ``endpoint`` answered a request sent at ``sent_at`` (monotonic seconds)."""
        if sent_at > self._answered_sent_at.get(endpoint, float("-inf")):
            self._answered_sent_at[endpoint] = sent_at

    def ever_answered(self, endpoint: str) -> bool:
        """Whether ``endpoint`` answered any request in this process."""
        return endpoint in self._answered_sent_at

    def answered_since(self, endpoint: str, since: float) -> bool:
        """Whether ``endpoint`` answered a request sent after ``since`` (monotonic seconds)."""
        return self._answered_sent_at.get(endpoint, float("-inf")) > since


HEALTH = EndpointHealth()
"""The process's record of which endpoints answer (shared by every cold source and thread)."""


def backoff_s(failure: Failure, attempt: int) -> float:
    """Seconds to wait before request ``attempt + 1``: capped exponential, full jitter."""
    base, cap = (THROTTLED_BASE_S, THROTTLED_CAP_S) if failure is Failure.THROTTLED else (BACKOFF_BASE_S,
                                                                                         BACKOFF_CAP_S)
    return random.uniform(0, min(cap, base * 2 ** (attempt - 1)))


class RetryBudget:
    """The retry decisions of one read: call :meth:`after_failure` after each failed request.

    Args:
        max_attempts: Requests per read for an object that keeps failing (``cold.max_attempts``).
        outage_budget_s: Seconds a read keeps trying while the endpoint fails as a whole
            (``cold.outage_budget_s``).
        endpoint: The endpoint's name in :data:`HEALTH`.
        rides_outages: False to give up after ``max_attempts`` even when the whole endpoint fails
            (a listing against an endpoint this process never reached: a wrong endpoint, most likely).
    """

    def __init__(self, max_attempts: int, outage_budget_s: float, endpoint: str, *,
                 rides_outages: bool = True) -> None:
        self.max_attempts = max_attempts
        self.outage_budget_s = outage_budget_s
        self.endpoint = endpoint
        self.rides_outages = rides_outages
        self.attempts = 0
        self._first_failure: float | None = None

    def after_failure(self, failure: Failure) -> float | None:
        """Count one failed request: the seconds to wait before the next, or ``None`` to give up."""
        self.attempts += 1
        now = time.monotonic()
        if self._first_failure is None:
            self._first_failure = now
        if failure is Failure.FINAL:
            return None
        delay = backoff_s(failure, self.attempts)
        if self.attempts < self.max_attempts:
            return delay
        if failure is not Failure.DOWN or not self.rides_outages or HEALTH.answered_since(self.endpoint,
                                                                                            self._first_failure):
            return None
        left = self._first_failure + self.outage_budget_s - now
        return min(delay, left) if left > 0 else None

    def final_error(self, error: TierloadError, failure: Failure) -> TierloadError:
        """The error to raise once :meth:`after_failure` gave up: ``error``, naming the bound it hit."""
        if failure is Failure.FINAL:
            return error
        if failure is Failure.DOWN and self.rides_outages and self.attempts >= self.max_attempts and \
                not HEALTH.answered_since(self.endpoint, self._first_failure or 0.0):
            spent = time.monotonic() - (self._first_failure or 0.0)
            kind = EndpointUnreachableError if isinstance(error, EndpointUnreachableError) else TransientBackendError
            return kind(f"the cold tier's endpoint failed every request for {spent:.1f}s, past the outage budget "
                        f"(cold.outage_budget_s={self.outage_budget_s:g}); {self.attempts} requests; "
                        f"last: {error.message}", tier=error.tier, url=error.url)
        return type(error)(f"{error.message}; gave up after {self.attempts} requests "
                           f"(cold.max_attempts={self.max_attempts})", tier=error.tier, url=error.url)


class AdaptiveLimit:
    """At most ``limit`` requests in flight: halved on throttling, one more per success.

    Additive increase, multiplicative decrease: ``SlowDown`` halves the limit (at most once per
    generation of requests: the ones sent before a halving cannot halve it again), each answered
    request raises it by one, up to ``ceiling``. One instance per event loop (not thread-safe).

    Args:
        ceiling: The most requests in flight (``cold.max_in_flight``).
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.limit = ceiling
        self.in_flight = 0
        self._generation = 0
        self._waiters: deque[asyncio.Future] = deque()

    async def acquire(self, retry: bool = False) -> int:
        """Wait for a free slot and take it; returns the token to pass to :meth:`release`.

        A ``retry`` (a request sent again after a failure) waits at the front of the queue: behind
        the thousands of first requests of later packs it would hold back the pack it belongs to,
        which a consumer may be waiting for, until all of them were sent.

        Slots go in arrival order: a freed slot is handed to the longest waiter as it is freed
        (:meth:`_wake` takes it on the waiter's behalf), so a request that arrives meanwhile
        cannot take it first. Taking turns by re-checking after a wake-up let newcomers take
        freed slots and sent the woken waiters to the back of the queue again, over and over:
        quadratic with the thousands of GETs a pack queues at once.
        """
        if self.in_flight < self.limit:  # then nobody waits (see _wake), save cancelled waiters
            self.in_flight += 1
            return self._generation
        waiter = asyncio.get_running_loop().create_future()
        if retry:
            self._waiters.appendleft(waiter)
        else:
            self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= 1  # the slot handed to it goes to the next waiter
                self._wake()
            # A cancelled waiter stays queued until _wake reaches it and skips it (it is done):
            # removing it here would scan the queue.
            raise
        return self._generation

    def release(self, token: int, outcome: Failure | None) -> None:
        """Give a slot back; ``outcome`` is ``None`` for an answered request, else its failure."""
        self.in_flight -= 1
        if outcome is None:
            self.limit = min(self.ceiling, self.limit + 1)
        elif outcome is Failure.THROTTLED and token == self._generation:
            self._generation += 1
            self.limit = max(1, self.limit // 2)
            log.warning("the cold tier throttles (SlowDown): at most %d requests in flight now (cold.max_in_flight "
                        "%d)", self.limit, self.ceiling)
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to the waiters, longest first (each slot is taken on its waiter's behalf)."""
        while self.in_flight < self.limit and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
