"""A thread that exports one owner's samples every few seconds, so the data path makes no metric call."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from tierload.metrics.samples import Sample
from tierload.metrics.sinks import MemorySink, default_sink

log = logging.getLogger(__name__)


class PeriodicExporter:
    """Calls ``collect()`` every ``interval_s`` seconds and pushes the samples to a sink.

    Args:
        collect: Returns the owner's samples (counters as running totals); called on the
            exporter's thread, so it takes the owner's lock itself.
        source: The owner's name in the sink (e.g. ``node:<id>``).
        interval_s: Seconds between exports.
        sink: Where samples go (default: :func:`~tierload.metrics.sinks.default_sink`).
    """

    def __init__(self, collect: Callable[[], list[Sample]], source: str, interval_s: float,
                 sink: MemorySink | None = None) -> None:
        self._collect = collect
        self.source = source
        self.interval_s = interval_s
        self.sink = sink if sink is not None else default_sink()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tierload-metrics-{source}", daemon=True)

    def start(self) -> PeriodicExporter:
        """Start exporting; returns self."""
        self._thread.start()
        return self

    def export_now(self) -> None:
        """Collect and push once, on the caller's thread."""
        self.sink.push(self._collect(), self.source)

    def stop(self) -> None:
        """Export a last time and stop the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._export_logged()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._export_logged()

    def _export_logged(self) -> None:
        try:
            self.export_now()
        except Exception:  # noqa: BLE001 - a metrics backend's failure must never stop the cache
            log.warning("exporting the metrics of %s failed", self.source, exc_info=True)
