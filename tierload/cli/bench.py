"""``tierload bench``: tierload side by side with other loaders on an emulated remote S3."""

from __future__ import annotations

from pathlib import Path

import click

from tierload.bench.contenders import CONTENDERS


def _names(value: str | None) -> tuple[str, ...] | None:
    if not value:
        return None
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}")
    return names


@click.command()
@click.option("--quick", is_flag=True, help="CI smoke run: 384 x 64 KiB, 2 epochs, 2 workers, "
              "s3fs/simplecache/tierload/ram, 1 run (< 3 min on 2 cores; asserts nothing about speed).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="bench-results", show_default=True,
              help="Directory for bench.json, bench.png, bench.txt and the contenders' logs.")
@click.option("--contenders", help=f"Comma-separated subset of: {', '.join(CONTENDERS)} (default: all; "
              "--quick: s3fs,simplecache,tierload,ram).")
@click.option("--repeats", type=click.IntRange(1, 20), help="Runs per contender; figures are medians "
              "[default: 3; --quick: 1].")
@click.option("--samples", type=click.IntRange(1), help="Images in the dataset [4000].")
@click.option("--sample-kib", type=click.IntRange(4), help="Size of one JPEG in KiB [256].")
@click.option("--epochs", type=click.IntRange(1, 50), help="Epochs [3].")
@click.option("--hot-fraction", type=click.FloatRange(0, 1, min_open=True),
              help="Local cache capacity as a fraction of the dataset [0.25].")
@click.option("--batch-size", type=click.IntRange(1), help="Batch size [32].")
@click.option("--workers", "num_workers", type=click.IntRange(0, 64), help="DataLoader workers [4].")
@click.option("--step-ms", type=click.FloatRange(0), help="Simulated compute per batch, ms [20].")
@click.option("--latency-ms", type=click.FloatRange(0), default=20.0, show_default=True,
              help="Emulated first-byte latency per request.")
@click.option("--connection-mb-s", type=click.FloatRange(0), default=4.0, show_default=True,
              help="Emulated bandwidth per connection, MB/s (0: unlimited).")
@click.option("--total-mb-s", type=click.FloatRange(0), default=16.0, show_default=True,
              help="Emulated bandwidth of all connections together, MB/s (0: unlimited).")
@click.option("--peers-python", type=click.Path(exists=True, dir_okay=False),
              help="Interpreter of the peers' environment [benchmarks/.venv-peers/bin/python].")
def bench(quick: bool, out_dir: str, contenders: str | None, repeats: int | None, samples, sample_kib, epochs,
          hot_fraction, batch_size, num_workers, step_ms, latency_ms, connection_mb_s, total_mb_s,
          peers_python) -> None:
    """Benchmark tierload against s3fs, simplecache, Streaming, LitData and all-in-RAM on an emulated S3."""
    import dataclasses

    from tierload.bench import report as bench_report
    from tierload.bench.emulated_s3 import LinkSettings
    from tierload.bench.run import QUICK_CONTENDERS, BenchOptions, run_bench
    from tierload.bench.workload import Workload

    base = Workload.quick() if quick else Workload()
    given = {"samples": samples, "sample_kib": sample_kib, "epochs": epochs, "hot_fraction": hot_fraction,
             "batch_size": batch_size, "num_workers": num_workers, "step_ms": step_ms}
    try:
        workload = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
        options = BenchOptions(workload=workload, link=LinkSettings(latency_ms, connection_mb_s, total_mb_s),
                               contenders=_names(contenders) or (QUICK_CONTENDERS if quick else tuple(CONTENDERS)),
                               repeats=repeats or (1 if quick else 3), out_dir=Path(out_dir),
                               peers_python=peers_python, probe_seconds=2.0 if quick else 5.0)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    result = run_bench(options, echo=lambda line: click.echo(f"bench: {line}", err=True))
    paths = bench_report.write(result, Path(out_dir))
    click.echo(bench_report.table(result))
    click.echo(f"\nwrote {paths['json']}, {paths['png']} and {paths['txt']} in {result['wall_s']:.0f} s")
    # A peer that fails is a finding, reported in the table; tierload failing, or anything
    # failing in the CI smoke run, must turn the exit status red.
    broken = [name for name, entry in result["contenders"].items()
              if entry.get("status") == "failed" and (quick or name.startswith("tierload"))]
    if broken:
        raise click.ClickException(f"contender(s) failed: {', '.join(broken)} (reasons in {paths['json']})")
