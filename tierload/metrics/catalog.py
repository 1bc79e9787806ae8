"""Every metric tierload exports, named once: kind, help text, label names, histogram buckets.

Names carry no ``_total`` suffix: the exporters add it to counters. Through Ray's metrics API
a metric ``tierload_hits`` appears on Ray's Prometheus endpoint as ``ray_tierload_hits_total``
(Ray prefixes ``ray_``); through ``prometheus_client`` as ``tierload_hits_total``
(:func:`exported_names` gives both spellings).

Labels: ``node`` is the node cache's node id (``cluster`` for the coordinator's warm tier);
``tier`` is ``hot-ram``, ``hot-disk``, ``hot`` (both levels together), ``peer``, ``warm`` or
``cold``; ``kind`` is a retry class of :class:`tierload.stores.cold.retry.Failure`; ``stream`` is a
rank's stream lineage (``dataset/seed/rank``, the same every epoch); ``rank`` is the training
rank and ``dataset`` the dataset id.
"""

from __future__ import annotations

from dataclasses import dataclass

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

# Seconds; from a local NVMe read (~100 us) to an S3 GET that waited out retries (~10 s).
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric.

    Attributes:
        name: Base name (no ``ray_`` prefix, no ``_total`` suffix).
        kind: ``counter``, ``gauge`` or ``histogram``.
        help: What it counts, with its unit.
        labels: Label names, in a fixed order.
        buckets: Histogram bucket upper bounds (seconds); empty for other kinds.
    """

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()


_NODE = ("node",)
_TIER = ("node", "tier")

METRICS: tuple[MetricSpec, ...] = (
    # --- accesses and where they were served (node cache)
    MetricSpec("tierload_accesses", COUNTER, "Planned block accesses of the training streams", _NODE),
    MetricSpec("tierload_hits", COUNTER, "Block accesses served by a tier (hot, peer, warm; staged: by a copy the hot "
               "tier refused, held in memory for the prefetch window)", _TIER),
    MetricSpec("tierload_misses", COUNTER, "Block accesses a tier could not serve (hot: not in hot; warm: went to "
               "cold)", _TIER),
    MetricSpec("tierload_read_bytes", COUNTER, "Bytes read from a tier by the node cache (cold, warm, peer; hot: "
               "served to consumers over the channel and to peers)", _TIER),
    MetricSpec("tierload_written_bytes", COUNTER, "Bytes written into a tier (hot levels, warm)", _TIER),
    # --- tier residency (node cache's hot levels; the coordinator's warm tier)
    MetricSpec("tierload_admissions", COUNTER, "Blocks admitted into a tier", _TIER),
    MetricSpec("tierload_evictions", COUNTER, "Blocks evicted from a tier by its policy", _TIER),
    MetricSpec("tierload_refusals", COUNTER, "Blocks a tier refused to admit", _TIER),
    MetricSpec("tierload_promotions", COUNTER, "Blocks fetched from a slower tier and placed into this one", _TIER),
    MetricSpec("tierload_demotions", COUNTER, "Blocks evicted from this tier and moved to a slower one (a lower "
               "hot level or warm)", _TIER),
    MetricSpec("tierload_used_bytes", GAUGE, "Bytes a tier holds (resident and reserved)", _TIER),
    MetricSpec("tierload_capacity_bytes", GAUGE, "A tier's capacity in bytes", _TIER),
    MetricSpec("tierload_blocks", GAUGE, "Blocks resident in a tier", _TIER),
    # --- the cold tier (S3)
    MetricSpec("tierload_s3_gets", COUNTER, "GET requests sent to the cold tier", _NODE),
    MetricSpec("tierload_s3_bytes", COUNTER, "Bytes received from the cold tier", _NODE),
    MetricSpec("tierload_s3_errors", COUNTER, "Failed cold-tier requests by kind (throttled, transient, down, final)",
               ("node", "kind")),
    MetricSpec("tierload_s3_retries", COUNTER, "Cold-tier requests sent again after a failure, by kind",
               ("node", "kind")),
    # --- fetching and prefetching
    MetricSpec("tierload_fetch_latency_seconds", HISTOGRAM, "Seconds to bring one block in from a tier "
               "(peer, warm, cold), retries included", ("node", "source"), LATENCY_BUCKETS_S),
    MetricSpec("tierload_fetch_errors", COUNTER, "Block fetches that failed", _NODE),
    MetricSpec("tierload_inflight_fetches", GAUGE, "Block fetches in flight on the node", _NODE),
    MetricSpec("tierload_staged_bytes", GAUGE, "Bytes held in memory for consumers (blocks the hot tier refused)",
               _NODE),
    MetricSpec("tierload_prefetch_lead_blocks", GAUGE, "Blocks scheduled ahead of a stream's slowest consumer",
               ("node", "stream")),
    MetricSpec("tierload_prefetch_lead_seconds", GAUGE, "Seconds of consumption the prefetched lead covers at the "
               "stream's recent rate", ("node", "stream")),
    MetricSpec("tierload_integrity_failures", COUNTER, "Block copies dropped because they failed their checksum",
               _NODE),
    # --- the training loop (per rank, from the training process)
    MetricSpec("tierload_stall_seconds", COUNTER, "Seconds the training loop waited for data inside next()",
               ("rank", "dataset")),
    MetricSpec("tierload_loop_seconds", COUNTER, "Seconds of the training loop (waiting and computing)",
               ("rank", "dataset")),
    MetricSpec("tierload_samples", COUNTER, "Samples the training loop received", ("rank", "dataset")),
)

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}


def exported_names(prefix: str = "ray_") -> set[str]:
    """The series names Prometheus scrapes for every metric, as exported with ``prefix``.

    Args:
        prefix: ``"ray_"`` for Ray's metrics endpoint, ``""`` for ``prometheus_client``.

    Returns:
        Counters as ``<prefix><name>_total``, gauges as ``<prefix><name>``, histograms as their
        ``_bucket``, ``_count`` and ``_sum`` series.
    """
    names: set[str] = set()
    for spec in METRICS:
        base = prefix + spec.name
        if spec.kind == COUNTER:
            names.add(base + "_total")
        elif spec.kind == GAUGE:
            names.add(base)
        else:
            names.update({base + "_bucket", base + "_count", base + "_sum"})
    return names
