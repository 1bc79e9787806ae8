"""``tierload policy simulate --sweep``: the capacity grid, its table or JSON, and its chart."""

from __future__ import annotations

import json

import click

from tierload.config.models import TierloadConfig
from tierload.simulator.stack import StackSpec
from tierload.simulator.trace import Trace


def run_sweep_command(trace: Trace, spec: StackSpec, config: TierloadConfig, sweep_text: str, *,
                      hot_names: tuple[str, ...], warm_names: tuple[str, ...], epochs: int, plot: str | None,
                      workers: int | None, as_json: bool, title: str, loader: dict | None = None) -> None:
    """Evaluate the grid of ``sweep_text`` (see :func:`tierload.simulator.sweep.parse_sweep`) and print it.

    Raises:
        ConfigError: A malformed sweep.
        MissingDependencyError: A chart without matplotlib (checked before the sweep runs).
    """
    from tqdm import tqdm

    from tierload.cli.replay_engine import compile_with_bar
    from tierload.simulator.fast.readiness import is_compiled
    from tierload.simulator.sweep import default_workers, parse_sweep, run_sweep
    from tierload.simulator.sweep_report import format_sweep, plot_sweep, require_matplotlib, sweep_to_json

    tier, shares = parse_sweep(sweep_text)
    if plot:
        require_matplotlib()
    data = trace.distinct_bytes()
    capacities = [int(share * data) for share in shares]
    policies = hot_names if tier == "hot" else warm_names
    points = len(capacities) * (len(policies) + (tier == "hot"))
    if not is_compiled():  # compile once here, not once per worker
        compile_with_bar(f"a sweep of {points} points")
    # disable=None: the bar shows on a terminal only, so --json output and logs stay clean.
    with tqdm(total=points, unit="point", desc=f"sweeping {tier}", leave=False, disable=None) as bar:
        sweep = run_sweep(trace, spec, tier, capacities, policies, epochs=epochs, cost=config.cost,
                          workers=workers or default_workers(points), done=lambda: bar.update(1))
    sweep.setup.update(loader or {})
    if plot:
        plot_sweep(sweep, plot, title)
    click.echo(json.dumps(sweep_to_json(sweep), indent=2) if as_json else format_sweep(sweep))
    if plot and not as_json:
        click.echo(f"chart: {plot}")
