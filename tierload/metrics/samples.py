"""Samples from the counters the actors already keep: pure functions, no metric call, no I/O.

The node cache counts every access once (:mod:`tierload.node.accounting`) and its parts keep
their own tallies (levels, fetches, the coordinator sync); here those numbers become labelled
samples of the metrics in :mod:`tierload.metrics.catalog`. Counters are sampled as running
totals: the sink turns them into increments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from tierload.metrics.catalog import BY_NAME
from tierload.stores.cold.retry import Failure

# Served-from counters of the node's stats, by tier.
_HITS = (("hot", "hot_hits"), ("staged", "staged_hits"), ("peer", "peer_hits"), ("warm", "warm_hits"))
_READ_BYTES = (("cold", "cold_bytes"), ("warm", "warm_bytes"), ("peer", "peer_bytes"), ("hot", "wire_raw_bytes"))
_LEVEL_COUNTERS = (("tierload_admissions", "admissions"), ("tierload_evictions", "evictions"),
                   ("tierload_refusals", "refusals"), ("tierload_promotions", "promotions"),
                   ("tierload_demotions", "demotions"), ("tierload_written_bytes", "written_bytes"))
_LEVEL_GAUGES = (("tierload_used_bytes", "used_bytes"), ("tierload_capacity_bytes", "capacity_bytes"),
                 ("tierload_blocks", "blocks"))
ERROR_KINDS = tuple(failure.value for failure in Failure)
RETRY_KINDS = tuple(failure.value for failure in Failure if failure is not Failure.FINAL)


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric: a counter's running total, a gauge's value, or one histogram observation.

    Attributes:
        name: A name in :data:`tierload.metrics.catalog.METRICS`.
        labels: ``(label, value)`` pairs in the spec's label order.
        value: Float (bytes, seconds or a count, as the metric's help says).
    """

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def sample(name: str, value: float, **labels: Any) -> Sample:
    """A :class:`Sample` with its labels put in the spec's order.

    Raises:
        KeyError: ``name`` is not in the catalog, or a label of its spec is missing.
    """
    spec = BY_NAME[name]
    return Sample(name, tuple((label, str(labels[label])) for label in spec.labels), float(value))


def node_samples(stats: Mapping[str, Any], leads: Iterable[tuple[str, int, float]] = (),
                 latencies: Iterable[tuple[str, float]] = ()) -> list[Sample]:
    """Samples of one node cache.

    Args:
        stats: :meth:`tierload.node.node_cache.NodeCache.stats` (``counters``, ``levels``,
            ``inflight``, ``staged_bytes``, ``sync``).
        leads: ``(stream, lead_blocks, lead_seconds)`` per open stream (see :class:`LeadClock`);
            ``lead_seconds`` NaN when the stream's rate is not known yet.
        latencies: ``(source, seconds)`` of the fetches finished since the last export.

    Returns:
        The samples, counters as running totals.
    """
    node = str(stats.get("node_id", "local"))
    counters = stats.get("counters", {})
    out = [sample("tierload_accesses", counters.get("accesses", 0), node=node)]
    out += [sample("tierload_hits", counters.get(key, 0), node=node, tier=tier) for tier, key in _HITS]
    out.append(sample("tierload_misses", counters.get("accesses", 0) - counters.get("hot_hits", 0), node=node,
                      tier="hot"))
    out.append(sample("tierload_misses", counters.get("cold_misses", 0), node=node, tier="warm"))
    out += [sample("tierload_read_bytes", counters.get(key, 0), node=node, tier=tier) for tier, key in _READ_BYTES]
    out.append(sample("tierload_s3_gets", counters.get("cold_gets", 0), node=node))
    out.append(sample("tierload_s3_bytes", counters.get("cold_bytes", 0), node=node))
    out += [sample("tierload_s3_errors", counters.get(f"cold_errors_{kind}", 0), node=node, kind=kind)
            for kind in ERROR_KINDS]
    out += [sample("tierload_s3_retries", counters.get(f"cold_retries_{kind}", 0), node=node, kind=kind)
            for kind in RETRY_KINDS]
    out.append(sample("tierload_integrity_failures", counters.get("integrity_failures", 0), node=node))
    out.append(sample("tierload_fetch_errors", counters.get("fetch_errors", 0), node=node))
    out.append(sample("tierload_inflight_fetches", stats.get("inflight", 0), node=node))
    out.append(sample("tierload_staged_bytes", stats.get("staged_bytes", 0), node=node))
    out += tier_samples(node, stats.get("levels", ()))
    sync = stats.get("sync") or {}
    if "warm_write_bytes" in sync:
        out.append(sample("tierload_written_bytes", sync["warm_write_bytes"], node=node, tier="warm"))
    for stream, blocks, seconds in leads:
        out.append(sample("tierload_prefetch_lead_blocks", blocks, node=node, stream=stream))
        if seconds == seconds:  # not NaN
            out.append(sample("tierload_prefetch_lead_seconds", seconds, node=node, stream=stream))
    out += [sample("tierload_fetch_latency_seconds", seconds, node=node, source=source)
            for source, seconds in latencies]
    return out


def tier_samples(node: str, levels: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """Samples of tier indexes' stats (:meth:`tierload.policies.tierindex.TierIndex.stats`, plus the hot
    tier's ``promotions``, ``demotions`` and ``written_bytes`` where present)."""
    out = []
    for level in levels:
        tier = level["tier"]
        out += [sample(name, level[key], node=node, tier=tier) for name, key in _LEVEL_COUNTERS if key in level]
        out += [sample(name, level[key], node=node, tier=tier) for name, key in _LEVEL_GAUGES if key in level]
    return out


def coordinator_samples(stats: Mapping[str, Any]) -> list[Sample]:
    """Samples of the coordinator (:meth:`tierload.coordinator.actor.Coordinator.stats`): the warm tier."""
    warm = stats.get("warm")
    return tier_samples("cluster", [warm]) if warm else []


def rank_samples(rank: int, dataset: str, stall_s: float, loop_s: float, samples: int) -> list[Sample]:
    """Samples of one rank's training loop (running totals over every epoch this process measured)."""
    return [sample("tierload_stall_seconds", stall_s, rank=rank, dataset=dataset),
            sample("tierload_loop_seconds", loop_s, rank=rank, dataset=dataset),
            sample("tierload_samples", samples, rank=rank, dataset=dataset)]


class LeadClock:
    """How many seconds of consumption each stream's prefetched lead covers, at its recent rate.

    The rate is the runs the stream's slowest consumer passed between two calls of
    :meth:`leads` (the export interval), so no timestamp is taken on the data path.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float, float]] = {}

    def leads(self, rows: Iterable[tuple[str, int, int]], now: float | None = None) -> list[tuple[str, int, float]]:
        """``(stream, lead_blocks, lead_seconds)`` for ``(stream, cursor_run, next_run)`` rows.

        Args:
            rows: Each open stream's lineage, the run its slowest consumer is at, and the
                prefetch frontier (the next run to schedule).
            now: ``time.monotonic()`` (given in tests).

        Returns:
            ``lead_seconds`` is NaN until a stream was seen moving between two calls; while it
            does not move, the last figure stands.
        """
        now = time.monotonic() if now is None else now
        out, seen = [], {}
        for stream, cursor_run, next_run in rows:
            lead = max(0, next_run - cursor_run)
            last = self._last.get(stream)
            if last is None or cursor_run < last[0]:  # new, or a new epoch of the same lineage
                seen[stream] = (cursor_run, now, float("nan"))
            elif cursor_run == last[0]:  # not moving: the rate is measured from where it last moved
                seen[stream] = last
            else:
                seen[stream] = (cursor_run, now, lead * (now - last[1]) / (cursor_run - last[0]))
            out.append((stream, lead, seen[stream][2]))
        self._last = seen
        return out
