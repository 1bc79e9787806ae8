"""Trace simulator: replay block accesses through tier policies without touching storage.

Build a trace (:func:`job_trace` for what a TieredDataset configuration reads,
:func:`read_trace` for a recorded one), replay it through a stack of tiers
(:func:`simulate`) or through every policy side by side (:func:`compare`), and see how far
each is from Belady's MIN (:func:`min_hits`).
"""

from tierload.simulator.belady import MinResult, min_hits
from tierload.simulator.report import Comparison, compare, format_table, to_json
from tierload.simulator.run import SimResult, StackSpec, simulate
from tierload.simulator.trace import DatasetShape, JobSpec, Trace, job_trace
from tierload.simulator.tracefile import read_trace, write_trace

__all__ = [
    "Comparison",
    "DatasetShape",
    "JobSpec",
    "MinResult",
    "SimResult",
    "StackSpec",
    "Trace",
    "compare",
    "format_table",
    "job_trace",
    "min_hits",
    "read_trace",
    "simulate",
    "to_json",
    "write_trace",
]
