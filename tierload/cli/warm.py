"""``tierload warm URL``: pre-stage a dataset into the warm tier ahead of a job, with a progress bar."""

from __future__ import annotations

import signal
import sys
import threading

import click

from tierload.cli.errors import fail, handle_errors
from tierload.config.loading import load_config
from tierload.errors import CapacityError
from tierload.units import format_bytes

INTERRUPTED_EXIT_CODE = 130  # the shell's code for a command ended by SIGINT


def _summary(result) -> str:
    lines = [f"warm tier: {format_bytes(result.warm_used_bytes)} / {format_bytes(result.warm_capacity_bytes)} "
             f"used (policy {result.policy}, through {result.where})",
             f"selection: {result.planned_blocks:,} blocks, {format_bytes(result.planned_bytes)}; already there: "
             f"{result.present_blocks:,} ({format_bytes(result.present_bytes)}); staged now: "
             f"{result.staged_blocks:,} ({format_bytes(result.staged_bytes)}) from "
             f"{format_bytes(result.cold_bytes)} in {result.cold_gets:,} cold GETs, {result.elapsed_s:.1f} s"]
    if result.too_large_blocks:
        lines.append(f"too large: {result.too_large_blocks:,} blocks ({format_bytes(result.too_large_bytes)}) are "
                     f"each larger than the warm tier ({format_bytes(result.warm_capacity_bytes)}; the largest "
                     f"block is {format_bytes(result.largest_block_bytes)}), so they were not read; the job reads "
                     "them from the cold tier")
    left = result.refused_blocks + result.skipped_blocks
    if result.interrupted:
        lines.append(f"interrupted: {left:,} blocks ({format_bytes(result.refused_bytes + result.skipped_bytes)}) "
                     "not staged yet; run the same command again to continue (staged blocks are kept)")
    elif left:
        lines.append(f"did not fit: {left:,} blocks ({format_bytes(result.refused_bytes + result.skipped_bytes)}) "
                     f"were refused by the warm tier ({result.policy}; capacity "
                     f"{format_bytes(result.warm_capacity_bytes)}); the job reads them from the cold tier. Raise "
                     "warm.capacity_bytes, or stage less (--fraction, --epochs)")
    return "\n".join(lines)


class _Bar:
    """A tqdm bar over the selection's bytes (rate, ETA), with blocks/s beside it."""

    def __init__(self) -> None:
        self.bar = None
        self.blocks_done = 0

    def start(self, result) -> None:
        from tqdm import tqdm

        # disable=None: no bar when stderr is not a terminal (logs keep only the summary)
        self.bar = tqdm(total=result.planned_bytes, initial=result.present_bytes, unit="B", unit_scale=True,
                        unit_divisor=1024, desc="staging", disable=None, dynamic_ncols=True)

    def update(self, result) -> None:
        if self.bar is None:
            return
        self.bar.update(result.done_bytes - self.bar.n)
        elapsed = self.bar.format_dict.get("elapsed") or 0
        blocks = result.staged_blocks + result.refused_blocks
        self.bar.set_postfix_str(f"{blocks:,} blocks, {blocks / elapsed if elapsed else 0:.0f} blocks/s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@click.command()
@click.argument("url")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="YAML config: the job's (same manifest, warm and ray settings).")
@click.option("--address", default=None, help="Ray cluster whose service owns the warm tier (default: ray.address).")
@click.option("--epochs", default=1, show_default=True, type=click.IntRange(1),
              help="Stage what the job's first N epochs need, in order of first use (each block counts as read "
              "N times for the warm tier's policy).")
@click.option("--fraction", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Stage only this fraction of the selection's bytes (the blocks needed first).")
@click.option("--layout", default=None, help="As the job's layout= (default: manifest.layout).")
@click.option("--seed", default=0, show_default=True, type=int, help="As the job's seed=.")
@click.option("--shuffle", default="auto", show_default=True,
              type=click.Choice(["auto", "sample", "block", "none"]), help="As the job's shuffle=.")
@click.option("--endpoint-url", default=None, help="S3 endpoint (default: cold.endpoint_url / AWS_ENDPOINT_URL).")
def warm(url, config_path, address, epochs, fraction, layout, seed, shuffle, endpoint_url) -> None:
    """Pre-stage URL's blocks into the warm tier ahead of a job.

    Resumable and idempotent: blocks already in the warm tier are neither read nor written again,
    so running it again after an interruption (Ctrl-C stops after the batch in flight) continues
    where it stopped. The warm tier's capacity is never exceeded; when the selection does not
    fit, its policy decides, staging stops at the first batch it refuses whole, and the summary
    says what was left for the job to read from the cold tier. Blocks larger than the whole warm
    tier are not read at all; a run that can stage nothing exits 1.
    """
    from tierload.deploy.prestage import prestage

    overrides = {"cold": {"endpoint_url": endpoint_url}} if endpoint_url else None
    config = handle_errors(load_config)(config_path, overrides)
    stop = threading.Event()
    bar = _Bar()

    def interrupt(_signum, _frame) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops at once

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        result = handle_errors(prestage)(url, config, layout=layout, epochs=epochs, fraction=fraction, seed=seed,
                                         shuffle=shuffle, address=address, on_start=bar.start,
                                         on_progress=bar.update, stop=stop)
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
    click.echo(_summary(result))
    if result.interrupted:
        sys.exit(INTERRUPTED_EXIT_CODE)
    if result.planned_blocks and not result.staged_blocks and not result.present_blocks:
        fail(_nothing_staged(result))


def _nothing_staged(result) -> CapacityError:
    """The error for a run that could stage nothing (exit 1): the capacity against the block sizes."""
    return CapacityError(f"nothing could be staged: warm.capacity_bytes is {format_bytes(result.warm_capacity_bytes)}"
                         f", the largest block {format_bytes(result.largest_block_bytes)} ("
                         f"{result.too_large_blocks:,} of {result.planned_blocks:,} blocks larger than the tier, "
                         f"{result.refused_blocks:,} refused by its {result.policy} policy); raise "
                         "warm.capacity_bytes", tier="warm")
