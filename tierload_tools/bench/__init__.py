"""``tierload bench``: tierload side by side with the loaders users would pick instead.

Everything runs on one machine: moto's S3 server behind an emulated remote link
(:mod:`tierload_tools.bench.emulated_s3`), a synthetic image workload (:mod:`tierload_tools.bench.workload`),
one subprocess per contender (:mod:`tierload_tools.bench.contenders`), and a report
(:mod:`tierload_tools.bench.report`). :func:`tierload_tools.bench.run.run_bench` ties them together.

Modules imported by contender subprocesses (``workload``, ``loop``, ``contenders.*``) import
only the standard library, numpy, PIL and torch at the top, so the peer loaders can run them
from a separate environment with the repository on ``PYTHONPATH``.
"""
