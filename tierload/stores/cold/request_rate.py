"""``cold.max_requests_per_s``: a ceiling on the requests one process sends to one store.

A store may allow fewer requests than tierload can send (the Hugging Face Hub blocked a team
that made 100k requests in a minute; S3 answers ``SlowDown`` past ~5,500 GETs/s per prefix).
The node cache does every cold read of its node, for every job and DataLoader worker there
(each dataset's blocks once, whoever asks), so one limit per store in its process holds the
whole node under it. Every request a :class:`~tierload.stores.cold.source.ColdSource` sends
takes a turn first: range GETs (:mod:`tierload.stores.cold.async_reads`), blocking reads of
other stores (:class:`~tierload.stores.cold.backend.ThreadedBackend`), each page of an S3
listing (:func:`~tierload.stores.cold.listing.list_s3`), and every listing or HEAD call
(:mod:`tierload.stores.cold.retried_call`: a HEAD is one request; an S3 listing's call takes one
turn besides its pages', erring on the side of fewer requests). Retries take turns too: they
are requests.

The turns are the generic cell rate algorithm (GCRA, the virtual-scheduling form of ITU-T
I.371; a token bucket filled at ``rate`` per second that holds one token): each request
reserves the earliest send time its predecessors leave it, ``1 / rate`` seconds after the
previous one, under one lock, and waits for it (``asyncio.sleep`` on an event loop,
``time.sleep`` in a thread). A request that wakes more than ``1 / rate`` seconds after its
turn (its event loop or thread was held up: the GIL, a busy loop) gives that turn up and takes
the next free one, so requests held up together never leave together. So over any interval of
``W`` seconds at most ``2 + rate * W`` requests are sent (a turn's own interval of lateness
allowed): no burst above the rate after an idle spell or a stall, as a store's per-second
accounting would see one. The lock is taken once per request only when a limit is set, and
then at most ``rate`` times a second; without a limit (the default) no request pays anything.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tierload.stores.cold.source import ColdSource

__all__ = ["RequestRate", "request_rate_for"]


class RequestRate:
    """At most ``2 + rate_per_s * W`` requests in any ``W`` seconds, shared by every thread and
    event loop of the process.

    Args:
        rate_per_s: Requests per second (> 0).
        clock: Monotonic seconds (``time.monotonic``; a test may drive its own).

    Raises:
        ValueError: ``rate_per_s`` is not > 0 (the config refuses it first, as a ConfigError).
    """

    def __init__(self, rate_per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate_per_s > 0:
            raise ValueError(f"rate_per_s={rate_per_s!r}: give a number of requests per second > 0")
        self.rate_per_s = float(rate_per_s)
        self._interval_s = 1.0 / self.rate_per_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next_s = float("-inf")  # the earliest send time of the next request (GCRA's TAT)

    def reserve(self) -> float:
        """Take the next turn: seconds to wait before sending (0: send now)."""
        with self._lock:
            now = self._clock()
            send_at = max(now, self._next_s)
            self._next_s = send_at + self._interval_s
        return send_at - now

    def _missed(self, turn_s: float) -> bool:
        """Whether a request whose turn was at ``turn_s`` woke too late to send on it."""
        return self._clock() - turn_s > self._interval_s

    def wait(self) -> None:
        """Take a turn and sleep in this thread until it comes (a missed turn: the next free one)."""
        while True:
            delay = self.reserve()
            if delay <= 0:
                return
            turn_s = self._clock() + delay
            time.sleep(delay)
            if not self._missed(turn_s):
                return

    async def wait_async(self) -> None:
        """Take a turn and await it, the event loop going on meanwhile (a missed turn: the next free one)."""
        while True:
            delay = self.reserve()
            if delay <= 0:
                return
            turn_s = self._clock() + delay
            await asyncio.sleep(delay)
            if not self._missed(turn_s):
                return


# (pid, scheme, bucket or host, endpoint, rate) -> its limit: one per store per process, never
# inherited through fork (a child has another pid).
_rates: dict[tuple[int, str, str, str, float], RequestRate] = {}
_rates_lock = threading.Lock()


def request_rate_for(source: ColdSource) -> RequestRate | None:
    """The limit on ``source``'s store in this process, or None when ``cold.max_requests_per_s`` is unset.

    Every source of one store (scheme, bucket or host, endpoint) shares it, whichever job's
    credentials it holds: the store counts the node's requests, not a job's.
    """
    rate = source.config.max_requests_per_s
    if rate is None:
        return None
    parts = urlsplit(source.url)
    key = (os.getpid(), parts.scheme, parts.netloc, source.location.endpoint_url, float(rate))
    limit = _rates.get(key)
    if limit is None:
        with _rates_lock:
            limit = _rates.setdefault(key, RequestRate(rate))
    return limit
