"""S3 bytes per epoch against the world size, whole epochs and elastic ones, in the simulator.

    python benchmarks/elastic_s3_bytes.py            # prints the setup and a Markdown table

Setup (printed): a dataset shape of ``--samples`` samples, ``--per-block`` per block of
``--block-mib`` MiB, block-aware shuffle (``window_blocks`` 8), one rank per node, each node's
hot tier ``--hot-blocks`` blocks (LRU), no warm tier (every node's miss is an S3 GET: the worst
case for the bill). One epoch from empty caches (epoch 0) is replayed by the simulator
(:func:`tierload.simulator.run.simulate`) over the trace of exactly the orders the dataset uses
(:mod:`tierload.simulator.elastic_trace`).

Rows: whole epochs at 1, 8 and 64 ranks with tierload's contiguous split; elastic epochs
resized at 40% of the ranks' slices (8 -> 64, 64 -> 8, 2 -> 4 -> 3); and, for contrast, the
strided split a ``DistributedSampler`` over the same global order gives (rank ``r`` takes
positions ``r, r + W, ...``).
Column ``S3 bytes / dataset``: bytes read from cold over the dataset's bytes (1.00 = every
byte once).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierload.data.order import epoch_order  # noqa: E402
from tierload.data.runs import counted_runs  # noqa: E402
from tierload.simulator.elastic_trace import elastic_epoch_trace  # noqa: E402
from tierload.simulator.run import simulate  # noqa: E402
from tierload.simulator.stack import StackSpec  # noqa: E402
from tierload.simulator.trace import DatasetShape, Trace  # noqa: E402


def strided_trace(shape: DatasetShape, world: int, window_blocks: int = 8) -> Trace:
    """Epoch 0 with rank ``r`` taking positions ``r::world`` of the same global order."""
    order = epoch_order(shape.sample_block, seed=0, epoch=0, shuffle="block", window_blocks=window_blocks)
    gap = shape.reuse_gap(window_blocks)
    blocks, nodes, times = [], [], []
    for rank in range(world):
        mine = order[rank::world]
        run_block, run_start = counted_runs(shape.sample_block[mine], np.zeros(0, np.int64), gap)
        blocks.append(run_block)
        nodes.append(np.full(len(run_block), rank, np.int64))
        times.append(run_start / max(len(mine), 1))
    block, node, time = (np.concatenate(x) for x in (blocks, nodes, times))
    by_time = np.lexsort((node, time))
    return Trace(block[by_time], node[by_time], np.zeros(len(block)), shape.block_bytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=256_000)
    parser.add_argument("--per-block", type=int, default=16)
    parser.add_argument("--block-mib", type=float, default=1.0)
    parser.add_argument("--hot-blocks", type=int, default=256)
    args = parser.parse_args()
    blocks = args.samples // args.per_block
    block_bytes = int(args.block_mib * 2**20)
    shape = DatasetShape.uniform(blocks, block_bytes, samples_per_block=args.per_block)
    spec = StackSpec(hot_policy="lru", hot_capacity_bytes=args.hot_blocks * block_bytes)
    total = int(shape.block_bytes.sum())
    print(f"setup: {args.samples} samples, {args.per_block} per block, {blocks} blocks of {args.block_mib:g} MiB "
          f"({total / 2**30:.2f} GiB), block shuffle window 8, hot tier {args.hot_blocks} blocks per node (lru), "
          "no warm tier, one rank per node, epoch 0 from empty caches")
    rows = [(f"{w} ranks", elastic_epoch_trace(shape, [(w, 1.0)], shuffle="block")) for w in (1, 8, 64)]
    rows += [("8 -> 64 ranks at 40%", elastic_epoch_trace(shape, [(8, 0.4), (64, 1.0)], shuffle="block")),
             ("64 -> 8 ranks at 40%", elastic_epoch_trace(shape, [(64, 0.4), (8, 1.0)], shuffle="block")),
             ("2 -> 4 -> 3 ranks at 40%, 40%",
              elastic_epoch_trace(shape, [(2, 0.4), (4, 0.4), (3, 1.0)], shuffle="block"))]
    rows += [(f"strided, {w} ranks (contrast)", strided_trace(shape, w)) for w in (8, 64)]
    print("\n| epoch | block accesses | S3 GiB | S3 bytes / dataset |\n|---|---|---|---|")
    for name, trace in rows:
        result = simulate(trace, spec)
        print(f"| {name} | {result.accesses} | {result.cold_bytes / 2**30:.2f} | {result.cold_bytes / total:.3f} |")


if __name__ == "__main__":
    main()
