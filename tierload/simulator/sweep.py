"""Capacity planning: replay one trace at a grid of tier capacities, every policy, in parallel.

``--sweep hot=5%..100%`` evaluates each hot-tier policy (with the configured warm tier) at
each capacity, and Belady's MIN for the hot tier; ``warm=...`` each warm policy with the
configured hot tier. Per point: hot hit ratio, S3 bytes and GETs per epoch, and, with a price
table (:class:`tierload.config.models.CostConfig`), dollars per training run. The *knee* of a
policy is its smallest capacity whose S3 bytes are within 5% of its best.

Grid points run in worker processes (``concurrent.futures``); the trace goes to them as
``.npy`` files they map, not through pickles (115 M accesses are 1.6 GB).
"""

from __future__ import annotations

import os
import re
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tierload.config.models import CostConfig
from tierload.errors import ConfigError
from tierload.simulator.run import simulate
from tierload.simulator.stack import SimResult, StackSpec
from tierload.simulator.trace import Trace

KNEE_TOLERANCE = 0.05  # the knee: the smallest capacity within 5% of the best S3 bytes
DEFAULT_POINTS = 8
_SHARE = r"(\d+(?:\.\d+)?)%"
_RANGE = re.compile(rf"^(hot|warm)={_SHARE}\.\.{_SHARE}(?:/(\d+))?$")
_LIST = re.compile(rf"^(hot|warm)=({_SHARE}(?:,{_SHARE})*)$")


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """``hot=5%..100%`` (8 points, evenly spaced), ``hot=5%..100%/20`` or ``warm=10%,25%,50%``.

    Returns:
        The tier (``"hot"`` or ``"warm"``) and its capacities as shares of the working set.

    Raises:
        ConfigError: Anything else, with the forms that are understood.
    """
    spaced = text.replace(" ", "")
    matched = _RANGE.match(spaced)
    if matched:
        tier, low, high, points = matched.group(1), float(matched.group(2)), float(matched.group(3)), matched.group(4)
        count = int(points) if points else DEFAULT_POINTS
        if high < low or count < 1:
            raise ConfigError(f"--sweep {text!r}: need START <= STOP and at least one point")
        shares = np.linspace(low, high, count) if count > 1 else np.array([low])
        return tier, [float(share) / 100 for share in shares]
    listed = _LIST.match(spaced)
    if listed:
        return listed.group(1), [float(part[:-1]) / 100 for part in listed.group(2).split(",")]
    raise ConfigError(f"--sweep {text!r}: use TIER=START%..STOP%[/POINTS] or TIER=A%,B%,... with TIER hot or warm")


@dataclass(frozen=True)
class SweepPoint:
    """One policy at one capacity."""

    policy: str
    capacity_bytes: int
    result: SimResult
    usd_per_run: float | None = None


@dataclass
class Sweep:
    """A grid of replays of one trace.

    Attributes:
        tier: The swept tier (``"hot"`` or ``"warm"``).
        capacities: Swept capacities in bytes (per node for the hot tier).
        shares: The same, as shares of the working set.
        points: One per (policy, capacity).
        min_hits: Hot sweeps: Belady's MIN hits per capacity; ``min_cold_bytes`` the bytes its misses read.
        setup: What was replayed.
    """

    tier: str
    capacities: list[int]
    shares: list[float]
    points: list[SweepPoint]
    min_hits: list[int] = field(default_factory=list)
    min_cold_bytes: list[int] = field(default_factory=list)
    setup: dict[str, Any] = field(default_factory=dict)

    @property
    def policies(self) -> list[str]:
        return list(dict.fromkeys(point.policy for point in self.points))

    def line(self, policy: str) -> list[SweepPoint]:
        """The points of one policy, by capacity."""
        return sorted((p for p in self.points if p.policy == policy), key=lambda p: p.capacity_bytes)

    def knee(self, policy: str) -> SweepPoint:
        """The smallest capacity whose S3 bytes are within :data:`KNEE_TOLERANCE` of the policy's best."""
        line = self.line(policy)
        best = min(point.result.cold_bytes for point in line)
        return next(p for p in line if p.result.cold_bytes <= best * (1 + KNEE_TOLERANCE))

    def cheapest(self, policy: str) -> SweepPoint | None:
        """The capacity of the lowest dollars per run (None without prices)."""
        priced = [p for p in self.line(policy) if p.usd_per_run is not None]
        return min(priced, key=lambda p: p.usd_per_run or 0.0) if priced else None


def usd_per_run(result: SimResult, spec: StackSpec, nodes: int, cost: CostConfig) -> float:
    """Dollars one training run costs: S3 GETs and egress, and the tiers' storage for ``cost.run_hours``."""
    gib = 2**30
    months = cost.run_hours / 730.0
    storage = (spec.hot_capacity_bytes * nodes / gib * cost.hot_usd_per_gb_month
               + (spec.warm_capacity_bytes / gib * cost.warm_usd_per_gb_month if spec.warm_policy else 0.0))
    return (result.cold_gets / 1000 * cost.s3_get_usd_per_1000 + result.cold_bytes / gib * cost.s3_egress_usd_per_gb
            + storage * months)


# ------------------------------------------------------------------ worker processes
_COLUMNS = ("block", "node", "epoch", "block_bytes", "job")


def _save(trace: Trace, folder: Path) -> None:
    for name in _COLUMNS:
        np.save(folder / f"{name}.npy", getattr(trace, name))


def _load(folder: str) -> Trace:
    # Copy-on-write maps: the pages are shared between workers, and the arrays are writable,
    # which is the array type the compiled replay was compiled (and cached) for.
    columns = {name: np.load(Path(folder) / f"{name}.npy", mmap_mode="c") for name in _COLUMNS}
    return Trace(columns["block"], columns["node"], columns["epoch"], np.asarray(columns["block_bytes"]),
                 columns["job"])


def _min_point(trace: Trace, capacity: int) -> tuple[int, int]:
    from tierload.simulator.fast.belady import min_hits_fast

    flags = np.zeros(len(trace), dtype=bool)
    hits = min_hits_fast(trace.block, trace.block_bytes, capacity, trace.node, flags)
    missed = np.bincount(trace.block[~flags], minlength=trace.num_blocks)
    return hits, int(missed @ trace.block_bytes)


def _run_point(folder: str | Trace, task: tuple[str, Any]) -> tuple[str, Any, Any]:
    trace = folder if isinstance(folder, Trace) else _load(folder)
    kind, arg = task
    if kind == "min":
        return kind, arg, _min_point(trace, arg)
    return kind, arg, simulate(trace, arg, engine="fast")


def _tasks(tier: str, base: StackSpec, capacities: Sequence[int], policies: Sequence[str]) -> list[tuple[str, Any]]:
    tasks: list[tuple[str, Any]] = []
    for capacity in capacities:
        for policy in policies:
            if tier == "hot":
                tasks.append(("sim", replace(base, hot_policy=policy, hot_capacity_bytes=capacity)))
            else:
                tasks.append(("sim", replace(base, warm_policy=policy, warm_capacity_bytes=capacity)))
        if tier == "hot":
            tasks.append(("min", capacity))
    return tasks


def _execute(trace: Trace, tasks: list[tuple[str, Any]], workers: int, done: Callable[[], None] | None) -> list:
    if workers <= 1:
        results = []
        for task in tasks:
            results.append(_run_point(trace, task))
            if done is not None:
                done()
        return results
    with tempfile.TemporaryDirectory(prefix="tierload-sweep-") as folder:
        _save(trace, Path(folder))
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_run_point, folder, task) for task in tasks]
            for future in as_completed(futures):
                future.result()
                if done is not None:
                    done()
            return [future.result() for future in futures]


def default_workers(points: int) -> int:
    """Worker processes for ``points`` grid points: one per core this process may use, at most."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, points))


def run_sweep(trace: Trace, base: StackSpec, tier: str, capacities: Sequence[int], policies: Sequence[str], *,
              epochs: int, cost: CostConfig | None = None, workers: int | None = None,
              done: Callable[[], None] | None = None) -> Sweep:
    """Replay ``trace`` at every capacity of ``tier`` with every policy (and MIN, for the hot tier).

    Args:
        trace: The accesses.
        base: The configured stack; the swept tier's capacity and policy change per point.
        tier: ``"hot"`` or ``"warm"``.
        capacities: Capacities in bytes (the hot tier's per node).
        policies: The policies of the swept tier to compare.
        epochs: Epochs in the trace (all jobs together), for "per epoch" figures.
        cost: Prices, or None for no dollars.
        workers: Worker processes (default: :func:`default_workers`).
        done: Called as each grid point finishes (a progress bar).

    Raises:
        ConfigError: A warm sweep without a warm tier, or a capacity below zero.
    """
    if tier == "warm" and base.warm_policy is None:
        raise ConfigError("--sweep warm=... needs a warm tier: set warm.url in the config or --warm-capacity")
    if min(capacities, default=0) < 0:
        raise ConfigError("swept capacities must be >= 0 bytes")
    tasks = _tasks(tier, base, capacities, policies)
    outcomes = _execute(trace, tasks, workers or default_workers(len(tasks)), done)
    nodes = max(trace.num_nodes, 1)
    data = max(trace.distinct_bytes(), 1)
    sweep = Sweep(tier, list(capacities), [c / data for c in capacities], [])
    mins: dict[int, tuple[int, int]] = {}
    for kind, arg, value in outcomes:
        if kind == "min":
            mins[arg] = value
            continue
        capacity = arg.hot_capacity_bytes if tier == "hot" else arg.warm_capacity_bytes
        policy = arg.hot_policy if tier == "hot" else arg.warm_policy
        price = usd_per_run(value, arg, nodes, cost) if cost is not None else None
        sweep.points.append(SweepPoint(policy, capacity, value, price))
    if mins:
        sweep.min_hits = [mins[c][0] for c in capacities]
        sweep.min_cold_bytes = [mins[c][1] for c in capacities]
    sweep.setup = {"accesses": len(trace), "working_set_bytes": data, "nodes": nodes, "jobs": trace.num_jobs,
                   "epochs": epochs, "hot_policy": base.hot_policy, "warm_policy": base.warm_policy,
                   "hot_capacity_bytes": base.hot_capacity_bytes, "warm_capacity_bytes": base.warm_capacity_bytes,
                   "cost": None if cost is None else cost.model_dump()}
    return sweep
