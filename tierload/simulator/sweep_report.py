"""A capacity sweep (:class:`tierload.simulator.sweep.Sweep`) as a text table, JSON or a PNG chart."""

from __future__ import annotations

from typing import Any

from tierload.errors import MissingDependencyError
from tierload.simulator.sweep import Sweep
from tierload.units import format_bytes


def _per_epoch(sweep: Sweep, value: float) -> float:
    return value / max(sweep.setup["epochs"], 1)


def sweep_to_json(sweep: Sweep) -> dict[str, Any]:
    """Plain data for ``--json``: every point, MIN per capacity and each policy's knee."""
    points = [{"policy": p.policy, "capacity_bytes": p.capacity_bytes, "hot_hit_ratio": p.result.hot_hit_ratio,
               "s3_bytes_per_epoch": _per_epoch(sweep, p.result.cold_bytes),
               "s3_gets_per_epoch": _per_epoch(sweep, p.result.cold_gets), "usd_per_run": p.usd_per_run,
               **p.result.to_dict()} for p in sweep.points]
    accesses = max(sweep.setup["accesses"], 1)
    return {"setup": sweep.setup, "tier": sweep.tier, "capacities_bytes": sweep.capacities, "shares": sweep.shares,
            # MIN is the hot tier's alone: a warm sweep has none (an empty list, not a failed zip).
            "min": [{"capacity_bytes": c, "hot_hit_ratio": hits / accesses,
                     "s3_bytes_per_epoch": _per_epoch(sweep, cold)}
                    for c, hits, cold in zip(sweep.capacities, sweep.min_hits, sweep.min_cold_bytes, strict=True)]
            if sweep.min_hits else [],
            "knee": {policy: sweep.knee(policy).capacity_bytes for policy in sweep.policies},
            "cheapest": {policy: (cheap.capacity_bytes if (cheap := sweep.cheapest(policy)) else None)
                         for policy in sweep.policies},
            "points": points}


def format_sweep(sweep: Sweep) -> str:
    """One row per (capacity, policy); ``<`` marks each policy's knee, ``$`` its cheapest run."""
    setup = sweep.setup
    per = "per node" if sweep.tier == "hot" else "shared"
    lines = [f"{setup['accesses']:,} accesses, {format_bytes(setup['working_set_bytes'])} of data, "
             f"{setup['epochs']} epoch(s) by {setup['jobs']} job(s) on {setup['nodes']} node(s); "
             f"{sweep.tier} tier swept ({per})", ""]
    priced = any(p.usd_per_run is not None for p in sweep.points)
    header = f"  {sweep.tier + ' capacity':>15} {'share':>6}  {'policy':<12} {'hot hit':>8} {'S3/epoch':>11} " \
             f"{'GETs/epoch':>12}"
    lines.append(header + (f" {'$ per run':>11}" if priced else ""))
    knees = {policy: sweep.knee(policy).capacity_bytes for policy in sweep.policies}
    cheapest = {policy: (cheap.capacity_bytes if (cheap := sweep.cheapest(policy)) else None)
                for policy in sweep.policies}
    for index, (capacity, share) in enumerate(zip(sweep.capacities, sweep.shares, strict=True)):
        for policy in sweep.policies:
            point = next(p for p in sweep.line(policy) if p.capacity_bytes == capacity)
            mark = ("<" if knees[policy] == capacity else " ") + ("$" if cheapest[policy] == capacity else " ")
            line = (f"{mark}{format_bytes(capacity):>15} {100 * share:>5.0f}%  {policy:<12} "
                    f"{100 * point.result.hot_hit_ratio:>7.2f}% "
                    f"{format_bytes(int(_per_epoch(sweep, point.result.cold_bytes))):>11} "
                    f"{_per_epoch(sweep, point.result.cold_gets):>12,.0f}")
            lines.append(line + (f" {point.usd_per_run:>11,.2f}" if point.usd_per_run is not None else ""))
        if sweep.min_hits:
            hits = sweep.min_hits[index] / max(setup["accesses"], 1)
            lines.append(f"  {'':>15} {'':>6}  {'MIN':<12} {100 * hits:>7.2f}% "
                         f"{format_bytes(int(_per_epoch(sweep, sweep.min_cold_bytes[index]))):>11}  "
                         "(hot tier alone, Belady)")
    lines += ["", "< knee: the smallest capacity within 5% of the policy's fewest S3 bytes"
              + ("; $ the policy's cheapest run" if priced else "")]
    return "\n".join(lines)


def require_matplotlib() -> None:
    """Check that a chart can be drawn, before any work whose result it would show.

    Raises:
        MissingDependencyError: matplotlib is not installed (it comes with the ``bench`` extra).
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingDependencyError("--plot needs matplotlib, which is not installed: pip install "
                                     "'tierload[bench]' (or pip install matplotlib), or leave out --plot",
                                     package="matplotlib", extra="bench") from None


# Each policy's own line style and marker, so curves that coincide stay told apart.
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def coinciding(values: dict[str, list]) -> list[list[str]]:
    """Groups (of two or more) of the names in ``values`` whose values are equal, in ``values``' order."""
    groups: dict[str, list[str]] = {}
    for name, points in values.items():
        groups.setdefault(repr(points), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def _same(names: list[str]) -> str:
    return " = ".join(names)


def plot_sweep(sweep: Sweep, path: str, title: str | None = None) -> None:
    """Write the sweep as a PNG: S3 bytes per epoch, hit ratio (and dollars) against capacity.

    Raises:
        MissingDependencyError: matplotlib is not installed (it comes with the ``bench`` extra).
    """
    import matplotlib.pyplot as plt

    figure = draw_sweep(sweep, title)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_sweep(sweep: Sweep, title: str | None = None) -> Any:
    """The sweep's chart as a matplotlib ``Figure`` (the caller saves and closes it).

    Each policy has its own line style and marker, and its knee (a large marker of the policy's
    shape, outlined in black) is drawn smaller the later the policy comes, so equal curves and
    knees at one point stay visible; the legend says which curves and which knees coincide.

    Raises:
        MissingDependencyError: matplotlib is not installed (it comes with the ``bench`` extra).
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    priced = any(p.usd_per_run is not None for p in sweep.points)
    panels = 3 if priced else 2
    figure, axes = plt.subplots(panels, 1, figsize=(8, 3.2 * panels), sharex=True)
    share = [100 * s for s in sweep.shares]
    gib = 2**30
    policies = sweep.policies
    knees = {policy: sweep.knee(policy) for policy in policies}
    for index, policy in enumerate(policies):
        line = sweep.line(policy)
        style = {"linestyle": _LINESTYLES[index % len(_LINESTYLES)], "marker": _MARKERS[index % len(_MARKERS)],
                 "markersize": max(9 - 1.5 * index, 3), "markerfacecolor": "none" if index % 2 else None}
        drawn = axes[0].plot(share, [_per_epoch(sweep, p.result.cold_bytes) / gib for p in line], label=policy,
                             **style)[0]
        style["color"] = drawn.get_color()
        axes[1].plot(share, [100 * p.result.hot_hit_ratio for p in line], **style)
        knee = knees[policy]
        at = 100 * knee.capacity_bytes / sweep.setup["working_set_bytes"]
        axes[0].plot([at], [_per_epoch(sweep, knee.result.cold_bytes) / gib], marker=style["marker"],
                     markersize=max(18 - 3 * index, 6), color=drawn.get_color(), markeredgecolor="black",
                     linestyle="none", zorder=3 + index)
        if priced:
            axes[2].plot(share, [p.usd_per_run for p in line], **style)
            cheapest = sweep.cheapest(policy)
            if cheapest is not None:
                axes[2].plot([100 * cheapest.capacity_bytes / sweep.setup["working_set_bytes"]],
                             [cheapest.usd_per_run], marker="v", markersize=max(15 - 2 * index, 5),
                             color=drawn.get_color(), markeredgecolor="black", linestyle="none", zorder=3 + index)
    if sweep.min_hits:
        accesses = max(sweep.setup["accesses"], 1)
        if sweep.setup.get("warm_policy") is None:  # with a warm tier, MIN's misses are no floor of S3 reads
            axes[0].plot(share, [_per_epoch(sweep, c) / gib for c in sweep.min_cold_bytes], "k--", label="MIN")
        axes[1].plot(share, [100 * h / accesses for h in sweep.min_hits], "k--", label="MIN")
    # What the eye cannot tell apart, the legend says: equal curves and knees at one point.
    same_curves = coinciding({policy: [(p.result.cold_bytes, p.result.hot_hits) for p in sweep.line(policy)]
                              for policy in policies})
    same_knees = coinciding({policy: [knees[policy].capacity_bytes, knees[policy].result.cold_bytes]
                             for policy in policies})
    notes = [f"curves coincide: {_same(names)}" for names in same_curves]
    notes += [f"knees at one point: {_same(names)}" for names in same_knees]
    handles, _ = axes[0].get_legend_handles_labels()
    handles += [Line2D([], [], linestyle="none", label=note) for note in notes]
    axes[0].set_ylabel("S3 GiB per epoch")
    axes[1].set_ylabel("hot hit ratio (%)")
    if priced:
        axes[2].set_ylabel("$ per training run")
    axes[-1].set_xlabel(f"{sweep.tier} tier capacity ({'per node, ' if sweep.tier == 'hot' else ''}% of the data)")
    axes[0].legend(handles=handles, title="big marker: knee, within 5% of the best", fontsize="small")
    if sweep.min_hits:
        axes[1].legend(fontsize="small")  # names the dashed line: Belady's MIN, the hot tier alone
    if priced:
        axes[2].legend(handles=[], title="\u25bc the policy's cheapest run", fontsize="small")
    for axis in axes:
        axis.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure
