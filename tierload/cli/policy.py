"""``tierload policy``: show, validate, simulate and apply tier policies."""

from __future__ import annotations

import json
import sys

import click

from tierload.cli.errors import handle_errors
from tierload.config.loading import load_config
from tierload.errors import ConfigError
from tierload.policies.registry import POLICIES, policy_names
from tierload.units import parse_bytes

HOT_POLICIES = policy_names("hot")
WARM_POLICIES = policy_names("warm")


class _Capacity(click.ParamType):
    """A size (``2GiB``, ``1048576``) or a share of the trace's working set (``25%``)."""

    name = "SIZE|PCT%"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        try:
            if text.endswith("%"):
                share = float(text[:-1]) / 100
                if share < 0:
                    raise ValueError
                return ("share", share)
            return ("bytes", parse_bytes(text, field=param.name if param else "capacity"))
        except (ValueError, ConfigError):
            self.fail(f"{value!r} is neither a size (e.g. 2GiB) nor a share of the data (e.g. 25%)", param, ctx)


def _bytes_of(capacity: tuple[str, float] | None, working_set: int) -> int | None:
    if capacity is None:
        return None
    kind, amount = capacity
    return int(amount * working_set) if kind == "share" else int(amount)


def _names(text: str | None, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    if not text:
        return allowed
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; choose from {', '.join(allowed)}", param_hint=option)
    return names


def _checked(file: str, consequence: str = ""):
    """The config in ``file``, or exit 2 after printing every problem in it."""
    from tierload.config.check import check_config_file

    config, problems = check_config_file(file)
    if problems:
        for problem in problems:
            click.echo(f"{file}: {problem}", err=True)
        click.echo(f"{file}: {len(problems)} problem(s){consequence}", err=True)
        sys.exit(2)
    return config


@click.group()
def policy() -> None:
    """Show, check, simulate and apply tier policies (YAML files like those in configs/)."""


@policy.command(name="list")
def list_policies() -> None:
    """List the eviction policies, the tiers that may run them, and what each does."""
    for spec in POLICIES.values():
        click.echo(f"{spec.name:<12} {'/'.join(spec.tiers):<9} {spec.description}")


@policy.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
def show(file: str | None, as_json: bool) -> None:
    """Print the effective configuration: FILE (or none) over the defaults, with TIERLOAD_* applied."""
    import yaml

    config = handle_errors(load_config)(file)
    data = config.to_dict()
    click.echo(json.dumps(data, indent=2) if as_json else yaml.safe_dump(data, sort_keys=False).rstrip())


@policy.command()
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file: str) -> None:
    """Check FILE and report every problem in it at once, with its line and key."""

    handle_errors(_checked)(file)
    click.echo(f"{file}: valid")


@policy.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False),
              help="Replay a recorded trace (text: KEY [SIZE_BYTES [NODE [EPOCH]]] per line, or Parquet) "
                   "instead of generating one.")
@click.option("--dataset", default="10000", show_default=True,
              help="Number of blocks, a dataset URL (s3://bucket/prefix: block count and sizes from its "
                   "manifest, listed with FILE's cold settings and cached), or a manifest file (tierload's "
                   "cached manifest: .arrow, or JSON).")
@click.option("--mix", "mix", multiple=True, metavar="DATASET=WEIGHT",
              help="A weighted mixture instead of --dataset: repeat for each source (DATASET as --dataset "
                   "takes it, e.g. --mix s3://b/web=0.7 --mix s3://b/code=0.3); the mixed order is the one "
                   "TieredDataset([Source(...), ...]) reads (docs/mixtures.md).")
@click.option("--layout", default=None, help="Layout of a --dataset URL [default: manifest.layout of FILE].")
@click.option("--block-size", default="1MiB", show_default=True, help="Size of each block (mean, with --size-spread).")
@click.option("--size-spread", default=0.0, show_default=True, type=click.FloatRange(0, 5),
              help="Log-normal sigma of block sizes around --block-size (0: equal blocks).")
@click.option("--samples-per-block", default=1, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--epochs", default=4, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--world-size", default=1, show_default=True, type=click.IntRange(1, 100_000), help="Ranks per job.")
@click.option("--nodes", default=None, type=click.IntRange(1, 100_000),
              help="Nodes per job, each with its own hot tier [default: one per rank].")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="Jobs reading the dataset, seeds --seed, --seed+1, ..., sharing the warm tier.")
@click.option("--stagger", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Epochs between the starts of consecutive jobs.")
@click.option("--workers", default=None, type=click.IntRange(0, 1024),
              help="DataLoader workers per rank (recorded; the trace is the same for any number).")
@click.option("--batch-size", default=None, type=click.IntRange(1, 10_000_000),
              help="Samples per batch (recorded; the trace is the same for any batch size).")
@click.option("--shuffle", default="auto", show_default=True, type=click.Choice(["auto", "sample", "block", "none"]))
@click.option("--window-blocks", default=8, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--drop-last", is_flag=True,
              help="As TieredDataset's drop_last: trim the epoch to a multiple of --world-size instead of padding it.")
@click.option("--hot-capacity", type=_Capacity(), help="Hot tier per node: a size or a share of the data, e.g. 25% "
              "[default: hot.capacity_bytes of FILE].")
@click.option("--warm-capacity", type=_Capacity(), help="Warm tier: a size or a share, 0 for none "
              "[default: warm.capacity_bytes of FILE].")
@click.option("--hot-policies", help=f"Hot policies to compare [default: {','.join(HOT_POLICIES)}].")
@click.option("--warm-policies", help=f"Warm policies to compare [default: {','.join(WARM_POLICIES)}].")
@click.option("--save-trace", type=click.Path(dir_okay=False),
              help="Also write the trace (text, or Parquet by suffix).")
@click.option("--sweep", "sweep_text", metavar="TIER=START%..STOP%[/POINTS]",
              help="Evaluate a grid of capacities of one tier (hot=5%..100%, warm=10%,25%,50%) with each of its "
                   "policies: a table of hit ratio, S3 bytes per epoch and $ per run (prices: cost: in FILE).")
@click.option("--plot", type=click.Path(dir_okay=False), help="With --sweep: also write the chart (PNG) here.")
@click.option("--processes", default=None, type=click.IntRange(1, 1024),
              help="With --sweep: grid points run in parallel [default: one process per core, at most].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of the table.")
def simulate(file: str, trace_file: str | None, dataset: str, block_size: str, size_spread: float,
             samples_per_block: int, epochs: int, seed: int, world_size: int, nodes: int | None, jobs: int,
             stagger: float, shuffle: str, window_blocks: int, hot_capacity, warm_capacity, hot_policies: str | None,
             warm_policies: str | None, save_trace: str | None, as_json: bool, layout: str | None = None,
             workers: int | None = None, batch_size: int | None = None, sweep_text: str | None = None,
             plot: str | None = None, processes: int | None = None, drop_last: bool = False,
             mix: tuple[str, ...] = ()) -> None:
    """Replay an access trace through the policies of FILE and all others, side by side.

    Without --trace, the trace is the one TieredDataset would read with these settings.
    With --sweep, a grid of capacities instead (see docs/policy.md, "Capacity planning").
    """

    hot_names = _names(hot_policies, HOT_POLICIES, "--hot-policies")
    warm_names = _names(warm_policies, WARM_POLICIES, "--warm-policies")
    config = handle_errors(_checked)(file)
    if plot:
        from tierload.simulator.sweep_report import require_matplotlib

        # Before the trace and the sweep: minutes of work must not end in a missing package.
        handle_errors(require_matplotlib)()

    def run() -> None:
        from tqdm import tqdm

        from tierload.cli.replay_engine import choose_engine
        from tierload.simulator.dataset_source import dataset_shape, mixed_shape
        from tierload.simulator.fast.tracegen import fast_job_trace
        from tierload.simulator.report import compare, format_table, replayed_accesses, to_json
        from tierload.simulator.stack import StackSpec
        from tierload.simulator.trace import JobSpec
        from tierload.simulator.tracefile import read_trace, write_trace

        block_bytes = parse_bytes(block_size, field="--block-size")
        if trace_file:
            trace = read_trace(trace_file, block_bytes=block_bytes)
            run_epochs = int(trace.epoch.max()) + 1 if len(trace) else 1
        else:
            def shape_of(name: str):
                return dataset_shape(name, config, block_bytes=block_bytes, size_spread=size_spread,
                                     samples_per_block=samples_per_block, seed=seed, layout=layout)

            shape = mixed_shape(mix, shape_of, shuffle, window_blocks) if mix else shape_of(dataset)
            trace = fast_job_trace([JobSpec(shape, epochs=epochs, seed=seed + j, world_size=world_size, nodes=nodes,
                                            shuffle=shuffle, window_blocks=window_blocks, drop_last=drop_last,
                                            start=j * stagger)
                                    for j in range(jobs)])
            run_epochs = epochs * jobs
        if save_trace:
            write_trace(trace, save_trace)
        working_set = trace.distinct_bytes()
        spec = StackSpec.from_config(config, hot_capacity_bytes=_bytes_of(hot_capacity, working_set),
                                     warm_capacity_bytes=_bytes_of(warm_capacity, working_set))
        # Recorded with the results; neither changes the trace (see tierload.simulator.trace).
        loader = {"dataloader_workers": workers, "batch_size": batch_size}
        if sweep_text:
            from tierload.cli.policy_sweep import run_sweep_command

            source = trace_file or (" + ".join(mix) if mix else
                                    f"{int(dataset):,} blocks" if dataset.isdigit() else dataset)
            title = (f"{source}: {run_epochs} epoch(s), "
                     f"{max(trace.num_nodes, 1)} node(s)")
            run_sweep_command(trace, spec, config, sweep_text, hot_names=hot_names, warm_names=warm_names,
                              epochs=run_epochs, plot=plot, workers=processes, as_json=as_json, title=title,
                              loader=loader)
            return
        engine = choose_engine(replayed_accesses(trace, spec, hot_names, warm_names))
        # disable=None: the bar shows on a terminal only, so --json output and logs stay clean.
        with tqdm(total=1, unit="access", unit_scale=True, desc="simulating", leave=False, disable=None) as bar:
            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            comparison = compare(trace, spec, hot_policies=hot_names, warm_policies=warm_names, progress=progress,
                                 engine=engine)
        comparison.setup.update(loader)
        click.echo(json.dumps(to_json(comparison), indent=2) if as_json else format_table(comparison))

    handle_errors(run)()


@policy.command(name="set")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--config", "deployment", type=click.Path(dir_okay=False),
              help="The deployment's config file, to find its actors [default: FILE].")
@click.option("--address", default=None,
              help="Ray address of the service (e.g. auto, 127.0.0.1:6379) [default: ray.address / RAY_ADDRESS, "
                   "else the Ray of the node cache running on this machine].")
def set_policy(file: str, deployment: str | None, address: str | None) -> None:
    """Apply the policy section of FILE to the running cluster's actors, without restarting jobs.

    It takes effect at each tier's next admission decision. An invalid FILE is refused with
    every problem listed, and the running policy stays as it is. Without a cluster (no
    --address, ray.address or RAY_ADDRESS) it finds the service through a node cache running
    on this machine, and says at once when there is none.
    """
    new = handle_errors(_checked)(file, "; refused, the running policy is unchanged")

    def run() -> None:
        from tierload.deploy.runtime import apply_policy  # imports Ray: only once the file is known good
        from tierload.deploy.service_probe import service_address

        target = load_config(deployment if deployment else file)
        cluster = service_address(target, address)  # decided without Ray: nothing runs, nothing is started

        target = target.model_copy(update={"ray": target.ray.model_copy(update={"address": cluster})})
        result = apply_policy(target, new.policy) or {}
        reached = [f"{len(result.get('nodes', []))} node cache(s)"]
        if result.get("coordinator"):
            reached.append("the coordinator")
        click.echo(f"applied the policy of {file} to {' and '.join(reached)}; it decides from their next admission on")

    handle_errors(run)()
