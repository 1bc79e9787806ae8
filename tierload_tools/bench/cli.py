"""``tierload bench``: tierload side by side with other loaders on an emulated remote S3."""

from __future__ import annotations

from pathlib import Path

import click

from tierload_tools.bench.contenders import CONTENDERS


def _names(value: str | None) -> tuple[str, ...] | None:
    if not value:
        return None
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(unknown)}; choose from {', '.join(CONTENDERS)}")
    return names


def _run_small(workload: str, quick: bool, out_dir: str, given: dict) -> None:
    """One small-object workload of issue 11 (``--workload small-files|small-s3|startup``)."""
    import dataclasses

    from tierload_tools.bench.small import report as small_report
    from tierload_tools.bench.small.run import SmallOptions, run_small

    base = SmallOptions.smoke(workload) if quick else SmallOptions(workload=workload)
    try:
        options = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    result = run_small(options, Path(out_dir), echo=lambda line: click.echo(f"bench: {line}", err=True))
    paths = small_report.write(result, Path(out_dir))
    click.echo(small_report.table(result))
    click.echo(f"\nwrote {paths['json']} and {paths['txt']} in {result['wall_s']:.0f} s")
    runs = [result.get("startup"), result.get("worker_memory"), *result.get("contenders", {}).values()]
    broken = [run.get("error") for run in runs if run is not None and not run.get("ok")]
    if broken:
        raise click.ClickException(f"{len(broken)} run(s) failed: {broken[0]} (details in {paths['json']})")


def _run_tokens(quick: bool, out_dir: str, given: dict) -> None:
    """The token workload of issue 23 (``--workload tokens``)."""
    import dataclasses

    from tierload_tools.bench.tokens import report as tokens_report
    from tierload_tools.bench.tokens.run import TokenOptions, run_tokens

    base = TokenOptions.quick() if quick else TokenOptions()
    try:
        options = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    result = run_tokens(options, Path(out_dir), echo=lambda line: click.echo(f"bench: {line}", err=True))
    paths = tokens_report.write(result, Path(out_dir))
    click.echo(tokens_report.table(result))
    click.echo(f"\nwrote {paths['json']} and {paths['txt']} in {result['wall_s']:.0f} s")
    broken = [name for name, run in result["contenders"].items() if not run.get("ok")]
    if broken or not result["digests_match"]:
        raise click.ClickException(f"failed: {', '.join(broken) or 'the digests of the windows read differ'} "
                                   f"(details in {paths['json']})")


def _run_mixture(quick: bool, out_dir: str, given: dict) -> None:
    """The mixture workload of issue 22 (``--workload mixture``)."""
    import dataclasses

    from tierload_tools.bench.mixture.run import MixtureOptions, run_mixture, table, write

    base = MixtureOptions.quick() if quick else MixtureOptions()
    try:
        options = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    result = run_mixture(options, Path(out_dir), echo=lambda line: click.echo(f"bench: {line}", err=True))
    paths = write(result, Path(out_dir))
    click.echo(table(result))
    click.echo(f"\nwrote {paths['json']} and {paths['txt']} in {result['wall_s']:.0f} s")
    run = result["contenders"]["tierload-mixture"]
    if not run.get("ok"):
        raise click.ClickException(f"failed: {run.get('error')} (details in {paths['json']})")


@click.command()
@click.option("--workload", "workload_name",
              type=click.Choice(["default", "small-files", "small-s3", "startup", "tokens", "mixture"]),
              default="default", show_default=True,
              help="default: the contenders on 4,000 JPEGs (below). small-files: 200,000 x 1 KiB files, plain "
              "DataLoader vs tierload (and Ray Data). small-s3: 100,000 x 4 KiB on the emulated S3 (20 ms, no cap) "
              "with the rig's own ceiling (and the S3 Connector for PyTorch, Ray Data). startup: a synthetic "
              "1,281,167-key listing through start-up, and worker memory at 2 M keys. tokens: 64 x 32 MiB "
              "uint16 token files (2 GiB) on the emulated S3 as windows of --seq-len + 1 tokens: tierload, a "
              "memory-mapped local loader and LitData's TokensLoader. With --quick, a 2,000-object smoke variant "
              "of each (tokens: 4 x 1 MiB). mixture: TieredDataset over two sources (1,000 + 1,000 x 64 KiB) "
              "weighted 70/30 on the emulated S3, hot tier --hot-fraction: samples/s, hot hit vs MIN, S3 bytes "
              "(--quick: 200 + 200 x 16 KiB).")
@click.option("--token-files", type=click.IntRange(1), help="tokens: files [64].")
@click.option("--file-tokens", type=click.IntRange(1), help="tokens: uint16 tokens per file [16777216].")
@click.option("--seq-len", type=click.IntRange(1), help="tokens: tokens per window minus one [2048].")
@click.option("--object-bytes", type=click.IntRange(0), help="small-files/small-s3: bytes per object "
              "[1024; small-s3: 4096].")
@click.option("--startup-keys", type=click.IntRange(1), help="startup: keys of the listing [1281167].")
@click.option("--memory-keys", type=click.IntRange(0), help="startup: keys of the worker-memory walk "
              "(0: skip) [2000000].")
@click.option("--profile", is_flag=True, help="small-files/small-s3: also profile tierload's epoch 1 with py-spy.")
@click.option("--page-cache", type=click.Choice(["cold", "warm"]), help="small-files: the dataset's files before "
              "each contender: out of the page cache, or all read once [cold].")
@click.option("--quick", is_flag=True, help="CI smoke run: 384 x 64 KiB, 2 epochs, 2 workers, "
              "s3fs/simplecache/s3torch/raydata/tierload/ram, 1 run (< 3 min on 2 cores; asserts nothing about speed).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="bench-results", show_default=True,
              help="Directory for bench.json, bench.png, bench.txt and the contenders' logs.")
@click.option("--contenders", help=f"Comma-separated subset of: {', '.join(CONTENDERS)} (default: all; "
              "--quick: s3fs,simplecache,s3torch,raydata,tierload,ram). Small workloads: tierload always, and "
              "those of s3torch, raydata, tierload-aiobotocore named (default: s3torch, raydata).")
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
          peers_python, workload_name: str, object_bytes, startup_keys, memory_keys, profile: bool,
          page_cache: str | None, token_files, file_tokens, seq_len) -> None:
    """Benchmark tierload against s3fs, simplecache, Streaming, LitData, the S3 Connector for PyTorch,
    Ray Data and all-in-RAM on an emulated S3, or run one of the small-object workloads (--workload)."""
    import dataclasses

    if workload_name == "mixture":
        _run_mixture(quick, out_dir, {"epochs": epochs, "batch_size": batch_size, "num_workers": num_workers,
                                      "hot_fraction": hot_fraction, "latency_ms": latency_ms,
                                      "connection_mb_s": connection_mb_s, "total_mb_s": total_mb_s})
        return
    if workload_name == "tokens":
        _run_tokens(quick, out_dir, {"files": token_files, "tokens_per_file": file_tokens, "seq_len": seq_len,
                                     "epochs": epochs, "batch_size": batch_size, "num_workers": num_workers,
                                     "hot_fraction": hot_fraction, "latency_ms": latency_ms,
                                     "connection_mb_s": connection_mb_s, "total_mb_s": total_mb_s,
                                     "peers_python": peers_python})
        return
    if workload_name != "default":
        small_s3 = workload_name == "small-s3"
        size = object_bytes if object_bytes is not None else (4096 if small_s3 else None)
        count = samples if samples is not None else (100_000 if small_s3 and not quick else None)
        given = {"count": count, "size": size, "epochs": epochs, "batch_size": batch_size,
                 "num_workers": num_workers, "latency_ms": latency_ms, "startup_keys": startup_keys,
                 "memory_keys": memory_keys, "profile": profile or None, "page_cache": page_cache}
        if contenders:  # tierload always runs; the others named here are the peers that run with it
            names = {n.strip() for n in contenders.split(",") if n.strip()}
            unknown = names - {"tierload", "s3torch", "raydata", "tierload-aiobotocore"}
            if unknown:
                raise click.BadParameter(f"unknown {', '.join(sorted(unknown))}; a small workload runs tierload "
                                         "and any of s3torch, raydata, tierload-aiobotocore (small-s3: S3 GETs "
                                         "through aiobotocore)", param_hint="--contenders")
            loaders = tuple(sorted(names - {"tierload"}))
            given.update(peers=bool(loaders), peer_loaders=loaders)
        _run_small(workload_name, quick, out_dir, given)
        return

    from tierload_tools.bench import report as bench_report
    from tierload_tools.bench.emulated_s3 import LinkSettings
    from tierload_tools.bench.run import QUICK_CONTENDERS, BenchOptions, run_bench
    from tierload_tools.bench.workload import Workload

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
