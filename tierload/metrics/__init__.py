"""Metrics in Prometheus format: what tierload exports, from which counters, through which sink.

:mod:`~tierload.metrics.catalog` names every metric once; :mod:`~tierload.metrics.samples`
turns the actors' stats (already counted by :mod:`tierload.node.accounting`) into samples;
:mod:`~tierload.metrics.sinks` hands samples to Ray's metrics API (or ``prometheus_client``
where Ray is absent); :mod:`~tierload.metrics.exporter` does that every few seconds on a thread
of its own, so the data path never makes a metric call.
"""
