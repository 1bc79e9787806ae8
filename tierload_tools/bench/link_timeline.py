"""Bytes on the emulated link over time: recorded by the proxy, summarised per epoch.

The proxy (:mod:`tierload_tools.bench.emulated_s3`) adds every object GET's arrival and every body
chunk it sends to a :class:`LinkTimeline` (bins of :data:`BIN_S` seconds of wall-clock time,
``time.time()``, so a contender process can ask for the bins of its own epoch). An epoch's
summary (:func:`epoch_link`) says when the first GET arrived and the first and last body byte
left, relative to the epoch's start, and the link's MB/s in each second of the epoch: where an
epoch's time went against the link bound (start-up before the first request, a link not kept
busy, the consumer's tail after the last byte).

Imported by contender subprocesses, also from the peers' environment: standard library only.
"""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Any

BIN_S = 0.05
TIMELINE_PATH = "/__bench__/timeline"


class LinkTimeline:
    """Object GETs and body bytes per :data:`BIN_S`-second bin of wall-clock time (proxy side)."""

    def __init__(self) -> None:
        self._bins: dict[int, list[int]] = {}  # bin -> [body bytes sent, GETs arrived]

    def _bin(self, now: float) -> list[int]:
        index = int(now // BIN_S)
        found = self._bins.get(index)
        if found is None:
            found = self._bins[index] = [0, 0]
        return found

    def add_bytes(self, count: int, now: float) -> None:
        """``count`` body bytes left the proxy at ``now`` (``time.time()``)."""
        self._bin(now)[0] += count

    def add_get(self, now: float) -> None:
        """An object GET arrived at ``now`` (``time.time()``)."""
        self._bin(now)[1] += 1

    def window(self, since: float, until: float) -> dict[str, Any]:
        """The bins from ``since`` to ``until`` (``time.time()`` seconds) as JSON-ready columns.

        Returns:
            ``{"bin_s", "start"`` (the first bin's start, s), ``"bytes"``, ``"gets"}`` (one int per bin).
        """
        first, last = int(since // BIN_S), int(until // BIN_S)
        rows = [self._bins.get(index, (0, 0)) for index in range(first, last + 1)]
        return {"bin_s": BIN_S, "start": first * BIN_S, "bytes": [row[0] for row in rows],
                "gets": [row[1] for row in rows]}


def read_timeline(endpoint_url: str, since: float, until: float) -> dict[str, Any]:
    """The proxy's :meth:`LinkTimeline.window` from ``since`` to ``until`` (``time.time()`` s)."""
    url = f"{endpoint_url}{TIMELINE_PATH}?since={since!r}&until={until!r}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def epoch_link(timeline: dict[str, Any], start: float, seconds: float) -> dict[str, Any]:
    """Where an epoch's link time went.

    Args:
        timeline: :func:`read_timeline` over (at least) the epoch.
        start: The epoch's start (``time.time()`` s).
        seconds: The epoch's length in seconds.

    Returns:
        ``first_get_s``, ``first_byte_s``, ``last_byte_s``: offsets from ``start`` in seconds,
        to a bin's resolution (the bin's start for the first, its end for the last; None when
        the epoch sent no GET / no byte); ``mb_s``: MB/s (10^6 bytes) in each whole or partial
        second of the epoch, rounded to 0.1.
    """
    bin_s, origin = timeline["bin_s"], timeline["start"]
    offsets = [origin + i * bin_s - start for i in range(len(timeline["bytes"]))]
    inside = [i for i, offset in enumerate(offsets) if -bin_s < offset < seconds]
    sent = [i for i in inside if timeline["bytes"][i]]
    asked = [i for i in inside if timeline["gets"][i]]
    per_second = [0.0] * max(1, math.ceil(seconds))
    for i in sent:
        per_second[min(len(per_second) - 1, max(0, int(offsets[i])))] += timeline["bytes"][i]
    # the last second may be partial: its rate over the part the epoch lasted
    lengths = [min(1.0, seconds - second) if seconds > second else 1.0 for second in range(len(per_second))]
    return {"first_get_s": round(max(0.0, offsets[asked[0]]), 3) if asked else None,
            "first_byte_s": round(max(0.0, offsets[sent[0]]), 3) if sent else None,
            "last_byte_s": round(min(seconds, offsets[sent[-1]] + bin_s), 3) if sent else None,
            "mb_s": [round(value / 1e6 / length, 1) for value, length in zip(per_second, lengths, strict=True)]}
