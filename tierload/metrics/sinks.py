"""Where samples go: Ray's metrics API, ``prometheus_client``, or only memory.

A sink takes the samples of one export (:mod:`tierload.metrics.samples`): counters as running
totals, which it turns into increments (a total that went down, a restarted counter, counts
from zero again); gauges as values (a gauge's label set missing from an export is set to 0, so
a closed stream's lead does not linger); histogram samples as observations. One sink per
process is enough; metric objects are made on first use and kept.

* :class:`RaySink`: ``ray.util.metrics``; the values appear on Ray's Prometheus endpoint
  (``ray_`` prefixed, see :mod:`tierload.metrics.catalog`) and its dashboard, no extra server.
* :class:`PrometheusSink`: ``prometheus_client`` (shipped with ``ray[default]``), for processes
  outside Ray; expose its registry yourself, e.g. ``prometheus_client.start_http_server``.
* :class:`MemorySink`: keeps the last values; for :func:`default_sink` when neither is there.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

from tierload.metrics.catalog import BY_NAME, COUNTER, GAUGE, MetricSpec
from tierload.metrics.samples import Sample
from tierload.ray_presence import ray_connected

log = logging.getLogger(__name__)

LabelSet = tuple[tuple[str, str], ...]


class MemorySink:
    """Applies samples to its own table of current values (and is the base of the other sinks).

    Attributes:
        values: ``{(name, labels): value}``: counters' totals, gauges' values, histograms'
            observation counts.
    """

    def __init__(self) -> None:
        self.values: dict[tuple[str, LabelSet], float] = {}
        self._gauges: dict[tuple[str, str], set[LabelSet]] = {}  # (source, name) -> label sets pushed
        self._lock = threading.Lock()

    def push(self, samples: Iterable[Sample], source: str = "") -> None:
        """Apply one export's samples (see the module docstring).

        Args:
            samples: Every sample of one export of ``source``.
            source: Who exports (e.g. ``node:<id>``): a gauge's label set is zeroed when the
                same source's next export lacks it.
        """
        with self._lock:
            seen: dict[str, set[LabelSet]] = {}
            for item in samples:
                spec = BY_NAME[item.name]
                key = (item.name, item.labels)
                if spec.kind == COUNTER:
                    total = self.values.get(key, 0.0)
                    increment = item.value - total if item.value >= total else item.value
                    self.values[key] = item.value
                    if increment > 0:
                        self._inc(spec, item.labels, increment)
                elif spec.kind == GAUGE:
                    self.values[key] = item.value
                    seen.setdefault(item.name, set()).add(item.labels)
                    self._set(spec, item.labels, item.value)
                else:
                    self.values[key] = self.values.get(key, 0.0) + 1
                    self._observe(spec, item.labels, item.value)
            names = {name for pushed_by, name in self._gauges if pushed_by == source} | set(seen)
            for name in names:
                now = seen.get(name, set())
                for gone in self._gauges.get((source, name), set()) - now:
                    self.values[(name, gone)] = 0.0
                    self._set(BY_NAME[name], gone, 0.0)
                self._gauges[(source, name)] = now

    def value(self, name: str, **labels: Any) -> float:
        """The current value of ``name`` at ``labels`` (0 if never pushed)."""
        spec = BY_NAME[name]
        return self.values.get((name, tuple((label, str(labels[label])) for label in spec.labels)), 0.0)

    # Backends override these three.
    def _inc(self, spec: MetricSpec, labels: LabelSet, amount: float) -> None:
        pass

    def _set(self, spec: MetricSpec, labels: LabelSet, value: float) -> None:
        pass

    def _observe(self, spec: MetricSpec, labels: LabelSet, value: float) -> None:
        pass


class RaySink(MemorySink):
    """Samples to ``ray.util.metrics`` (call in a process connected to Ray: an actor or a driver)."""

    def __init__(self) -> None:
        super().__init__()
        self._metrics: dict[str, Any] = {}

    def _metric(self, spec: MetricSpec) -> Any:
        metric = self._metrics.get(spec.name)
        if metric is None:
            from ray.util import metrics

            if spec.kind == COUNTER:
                metric = metrics.Counter(spec.name, spec.help, tag_keys=spec.labels)
            elif spec.kind == GAUGE:
                metric = metrics.Gauge(spec.name, spec.help, tag_keys=spec.labels)
            else:
                metric = metrics.Histogram(spec.name, spec.help, boundaries=list(spec.buckets), tag_keys=spec.labels)
            self._metrics[spec.name] = metric
        return metric

    def _inc(self, spec: MetricSpec, labels: LabelSet, amount: float) -> None:
        self._metric(spec).inc(amount, tags=dict(labels))

    def _set(self, spec: MetricSpec, labels: LabelSet, value: float) -> None:
        self._metric(spec).set(value, tags=dict(labels))

    def _observe(self, spec: MetricSpec, labels: LabelSet, value: float) -> None:
        self._metric(spec).observe(value, tags=dict(labels))


class PrometheusSink(MemorySink):
    """Samples to ``prometheus_client`` metrics in ``registry`` (default: its global registry).

    Args:
        registry: A ``prometheus_client.CollectorRegistry``, or None for the global one.

    Raises:
        ImportError: ``prometheus_client`` is not installed.
    """

    def __init__(self, registry: Any = None) -> None:
        import prometheus_client

        super().__init__()
        self._client = prometheus_client
        self._registry = registry if registry is not None else prometheus_client.REGISTRY
        self._metrics: dict[str, Any] = {}

    def _metric(self, spec: MetricSpec) -> Any:
        metric = self._metrics.get(spec.name)
        if metric is None:
            client, registry = self._client, self._registry
            if spec.kind == COUNTER:
                metric = client.Counter(spec.name, spec.help, spec.labels, registry=registry)
            elif spec.kind == GAUGE:
                metric = client.Gauge(spec.name, spec.help, spec.labels, registry=registry)
            else:
                metric = client.Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry)
            self._metrics[spec.name] = metric
        return metric

    def _inc(self, spec: MetricSpec, labels: LabelSet, amount: float) -> None:
        self._metric(spec).labels(*(value for _, value in labels)).inc(amount)

    def _set(self, spec: MetricSpec, labels: LabelSet, value: float) -> None:
        self._metric(spec).labels(*(value for _, value in labels)).set(value)

    def _observe(self, spec: MetricSpec, labels: LabelSet, value: float) -> None:
        self._metric(spec).labels(*(value for _, value in labels)).observe(value)


_SHARED: MemorySink | None = None
_SHARED_LOCK = threading.Lock()


def default_sink() -> MemorySink:
    """This process's sink: Ray's metrics when connected to Ray, else ``prometheus_client``'s
    global registry when installed, else memory only. Made once per process, and made again as
    Ray's once the process connects to Ray (a process that exported before ``ray.init`` would
    otherwise never reach Ray's endpoint).

    Ray's and prometheus_client's metric objects are process-wide, so two sinks of one kind in
    one process would count twice; every exporter of a process shares this one.
    """
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or (not isinstance(_SHARED, RaySink) and ray_connected()):
            _SHARED = _make_default_sink()
        return _SHARED


def _make_default_sink() -> MemorySink:
    try:
        import ray

        if ray.is_initialized():
            return RaySink()
    except ImportError:
        pass
    try:
        return PrometheusSink()
    except ImportError:
        log.info("neither Ray nor prometheus_client here: tierload's metrics are kept in memory only")
        return MemorySink()
