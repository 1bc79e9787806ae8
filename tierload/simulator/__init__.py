"""Trace simulator: replay block accesses through tier policies without touching storage.

Build a trace (``trace.job_trace`` for what a TieredDataset configuration reads,
``tracefile.read_trace`` for a recorded one), replay it through a stack of tiers
(``run.simulate``) or through every policy side by side (``report.compare``), and see how far
each is from Belady's MIN (``belady.min_hits``). ``fast/`` is the compiled replay.
"""
