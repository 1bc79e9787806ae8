"""All policies side by side on one trace, against Belady's MIN, as a table or JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from tierload.errors import ConfigError
from tierload.policies.registry import policy_names
from tierload.simulator.belady import MinResult, min_hits
from tierload.simulator.run import simulate
from tierload.simulator.stack import SimResult, StackSpec
from tierload.simulator.trace import Progress, Trace
from tierload.units import format_bytes

HOT_POLICIES = policy_names("hot")
WARM_POLICIES = policy_names("warm")


@dataclass
class Comparison:
    """The replays of one trace through several stacks, and the ceiling.

    Attributes:
        spec: The configured stack (the first row).
        rows: One result per stack: the configured one, then every other hot policy with the
            configured warm policy, then every other warm policy with the configured hot one.
        ceiling: Belady's MIN for the hot tiers (each node's, at the hot capacity).
        setup: What was replayed (trace size, working set, nodes, jobs, capacities).
    """

    spec: StackSpec
    rows: list[SimResult]
    ceiling: MinResult
    setup: dict[str, Any] = field(default_factory=dict)

    def row(self, hot: str, warm: str | None = None) -> SimResult:
        """The result of one (hot, warm) pair; ``warm`` defaults to the configured one.

        Raises:
            KeyError: That pair was not replayed.
        """
        warm = self.spec.warm_policy if warm is None else warm
        for result in self.rows:
            if result.hot_policy == hot and result.warm_policy == warm:
                return result
        raise KeyError(f"no replay of hot={hot!r}, warm={warm!r}")


def replayed_accesses(trace: Trace, spec: StackSpec, hot_policies: Sequence[str] = HOT_POLICIES,
                      warm_policies: Sequence[str] = WARM_POLICIES) -> int:
    """The accesses :func:`compare` replays in all: the trace once per stack, and once for MIN."""
    return len(trace) * (len(stacks_to_compare(spec, hot_policies, warm_policies)) + 1)


def stacks_to_compare(spec: StackSpec, hot_policies: Sequence[str] = HOT_POLICIES,
                      warm_policies: Sequence[str] = WARM_POLICIES) -> list[StackSpec]:
    """The configured stack first, then one policy changed at a time.

    Raises:
        ConfigError: An unknown policy name.
    """
    for name in hot_policies:
        if name not in HOT_POLICIES:
            raise ConfigError(f"unknown hot-tier policy {name!r}; choose from {', '.join(HOT_POLICIES)}")
    for name in warm_policies:
        if name not in WARM_POLICIES:
            raise ConfigError(f"unknown warm-tier policy {name!r}; choose from {', '.join(WARM_POLICIES)}")
    stacks = [spec]
    stacks += [spec.with_policies(hot, spec.warm_policy) for hot in hot_policies if hot != spec.hot_policy]
    if spec.warm_policy is not None:
        stacks += [spec.with_policies(spec.hot_policy, warm) for warm in warm_policies if warm != spec.warm_policy]
    return stacks


def compare(trace: Trace, spec: StackSpec, *, hot_policies: Sequence[str] = HOT_POLICIES,
            warm_policies: Sequence[str] = WARM_POLICIES, progress: Progress | None = None,
            engine: str = "auto") -> Comparison:
    """Replay ``trace`` through the configured stack and its one-policy variations.

    Args:
        trace: The accesses.
        spec: The configured stack.
        hot_policies, warm_policies: The policies to put side by side.
        progress: Called with (accesses replayed, accesses to replay) over all replays.
        engine: As :func:`tierload.simulator.run.simulate`'s (``"reference"`` also for MIN).

    Returns:
        Every replay and Belady's MIN for the hot tier.

    Raises:
        ConfigError: An unknown policy name or a negative capacity.
    """
    stacks = stacks_to_compare(spec, hot_policies, warm_policies)
    total = len(trace) * (len(stacks) + 1)

    def shifted(base: int) -> Progress | None:
        return None if progress is None else (lambda done, _length: progress(base + done, total))

    ceiling = min_hits(trace.block, trace.block_bytes, spec.hot_capacity_bytes, trace.node, shifted(0),
                       engine="reference" if engine == "reference" else "fast")
    if stacks and engine != "reference":
        _load_replay(trace, stacks[0])
    rows = [simulate(trace, stack, shifted(len(trace) * (i + 1)), engine=engine) for i, stack in enumerate(stacks)]
    working_set = trace.distinct_bytes()
    setup = {"accesses": len(trace), "blocks": int(trace.touched().sum()), "working_set_bytes": working_set,
             "nodes": trace.num_nodes, "jobs": trace.num_jobs,
             "hot_capacity_bytes": spec.hot_capacity_bytes, "warm_capacity_bytes": spec.warm_capacity_bytes,
             "hot_policy": spec.hot_policy, "warm_policy": spec.warm_policy, "half_life": spec.half_life}
    return Comparison(spec, rows, ceiling, setup)


def to_json(comparison: Comparison) -> dict[str, Any]:
    """Plain data for ``--json``."""
    ceiling = comparison.ceiling
    return {"setup": comparison.setup,
            "min": {"hot_hit_ratio": ceiling.hit_ratio, "hits": ceiling.hits, "exact": ceiling.exact,
                    "accesses_per_s": ceiling.accesses / ceiling.cpu_seconds if ceiling.cpu_seconds else 0.0},
            "rows": [{**row.to_dict(), "configured": i == 0,
                      "gap_to_min_pp": 100 * (ceiling.hit_ratio - row.hot_hit_ratio)}
                     for i, row in enumerate(comparison.rows)]}


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def format_table(comparison: Comparison) -> str:
    """The comparison as a text table; the configured stack is marked ``*``."""
    setup, ceiling, spec = comparison.setup, comparison.ceiling, comparison.spec
    working_set = setup["working_set_bytes"]
    lines = [f"{setup['accesses']:,} accesses to {setup['blocks']:,} blocks ({format_bytes(working_set)}) "
             f"by {setup['jobs']} job(s) on {setup['nodes']} node(s)",
             f"hot tier {format_bytes(spec.hot_capacity_bytes)} per node "
             f"({_share(spec.hot_capacity_bytes, working_set)} of the data)"
             + (f", warm tier {format_bytes(spec.warm_capacity_bytes)} "
                f"({_share(spec.warm_capacity_bytes, working_set)})" if spec.warm_policy else ", no warm tier"),
             ""]
    warm = spec.warm_policy is not None
    header = f"  {'hot policy':<12} {'warm policy':<11} {'hot hit':>8} {'vs MIN':>8}"
    if warm:
        header += f" {'warm hit':>8}"
    header += f" {'cold GETs':>11} {'cold bytes':>11} {'hot in':>10} {'hot out':>10}"
    if warm:
        header += f" {'warm in':>9} {'warm out':>9}"
    header += f" {'accesses/s':>11}"
    lines.append(header)
    for i, row in enumerate(comparison.rows):
        line = (f"{'*' if i == 0 else ' '} {row.hot_policy:<12} {row.warm_policy or '-':<11} "
                f"{100 * row.hot_hit_ratio:>7.2f}% {100 * (row.hot_hit_ratio - ceiling.hit_ratio):>+6.2f}pp")
        if warm:
            line += f" {100 * row.warm_hit_ratio:>7.2f}%"
        line += (f" {row.cold_gets:>11,} {format_bytes(row.cold_bytes):>11} {row.hot_promotions:>10,} "
                 f"{row.hot_demotions:>10,}")
        if warm:
            line += f" {row.warm_promotions:>9,} {row.warm_demotions:>9,}"
        line += f" {row.accesses_per_s:>11,.0f}"
        lines.append(line)
    kind = "exact: equal block sizes" if ceiling.exact else "mixed block sizes: a reference, not a bound"
    lines.append(f"  {'MIN':<12} {'':<11} {100 * ceiling.hit_ratio:>7.2f}%  Belady's MIN for the hot tier ({kind})")
    lines += ["", "hot hit: accesses served by the node's hot tier; warm hit: share of hot misses the warm tier "
              "served; in/out: blocks promoted into / demoted out of the tier; * the configured policies"]
    return "\n".join(lines)


def _load_replay(trace: Trace, stack: StackSpec) -> None:
    """Replay the trace's first accesses once, untimed, so that the first row's accesses/s does
    not include compiling the replay (first use on a machine, ~2 CPU-minutes) or loading it from
    numba's cache (~0.4 s)."""
    head = slice(0, min(len(trace), 64))
    simulate(Trace(trace.block[head], trace.node[head], trace.epoch[head], trace.block_bytes, trace.job[head]),
             stack)
