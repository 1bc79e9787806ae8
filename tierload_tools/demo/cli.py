"""``tierload demo``: the end-to-end job on embedded defaults."""

from __future__ import annotations

import click

from tierload.cli.errors import handle_errors
from tierload.units import format_bytes


def _row(result) -> str:
    ratio = result.hit_ratio
    return (f"{result.epoch + 1:>5}  {result.accuracy * 100:>7.1f}%  {result.samples_per_s:>9.0f}  "
            f"{result.stall_fraction * 100:>6.1f}%  {ratio['hot'] * 100:>5.1f}%  {ratio['warm'] * 100:>5.1f}%  "
            f"{ratio['cold'] * 100:>5.1f}%  {format_bytes(result.cold_bytes):>10}  {result.cold_gets:>8}")


@click.command()
@click.option("--layout", type=click.Choice(["imagefolder", "parquet"]), default="imagefolder",
              show_default=True, help="PNG files in class folders, or Parquet row groups.")
@click.option("--epochs", default=3, show_default=True, type=click.IntRange(1, 100))
@click.option("--workers", "num_workers", default=2, show_default=True, type=click.IntRange(0, 32),
              help="DataLoader worker processes.")
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(1, 4096))
def demo(layout: str, epochs: int, num_workers: int, batch_size: int) -> None:
    """Train a small CNN on scikit-learn's digits, streamed from a local S3 through the tiers."""
    from tqdm import tqdm

    from tierload_tools.demo.run import run_demo

    bar = None

    def on_setup(setup: dict) -> None:
        click.echo(f"local S3 at {setup['endpoint']}; {setup['train_samples']} training and "
                   f"{setup['test_samples']} held-out digits as {setup['layout']} "
                   f"({setup['blocks']} blocks, {format_bytes(setup['block_bytes'])}"
                   # Parquet footers and metadata are objects' bytes but no block's
                   + (f" of {format_bytes(setup['train_bytes'])} in objects)"
                      if setup['block_bytes'] != setup['train_bytes'] else ")"))
        click.echo(f"hot tier {format_bytes(setup['hot_capacity_bytes'])}, warm tier "
                   f"{format_bytes(setup['warm_capacity_bytes'])} (both smaller than the data set); "
                   f"DataLoader num_workers={setup['num_workers']}")

    def on_batch(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            # disable=None: no bar when stdout is not a terminal (logs keep only the table)
            bar = tqdm(total=total, desc="training", unit="batch", leave=False, disable=None)
        bar.update(1)
        if done == total:
            bar.close()
            bar = None

    header_shown = False

    def on_epoch(result) -> None:
        nonlocal header_shown
        if not header_shown:
            click.echo("epoch  held-out  samples/s   stall    hot   warm   cold  cold bytes  cold GETs")
            header_shown = True
        click.echo(_row(result))

    handle_errors(run_demo)(layout=layout, epochs=epochs, num_workers=num_workers, batch_size=batch_size,
                            on_setup=on_setup, on_batch=on_batch, on_epoch=on_epoch)
