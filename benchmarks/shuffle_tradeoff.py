"""Randomness versus cache efficiency of the two shuffle modes, measured on a real epoch.

    python benchmarks/shuffle_tradeoff.py            # prints the setup and a Markdown table

Setup (printed): a local S3 server (moto) holding one ``.npy`` file of ``--rows`` rows cut into
blocks of ``--rows-per-block`` rows (``manifest.block_bytes``), a hot tier holding
``--hot-fraction`` of the data set, prefetch limited to ``--depth`` blocks (as ``prefetch.depth_bytes``
limits it with large blocks), no warm tier, one epoch per mode through a DataLoader.

Columns:
* ``blocks/batch``: mean number of distinct blocks in a batch (higher = better mixed; a batch
  from one block is the least random);
* ``decoded RAM``: blocks the consumer keeps decoded to serve a window (``window_blocks + 2``
  for multi-sample blocks); the node cache also holds a block in memory for as long as its
  run lasts when the hot tier cannot, so a window of all blocks holds the whole data set;
* ``read amp.``: bytes read from the cold tier / data set bytes (1.0 = every block read once);
* ``cold GETs``: requests to the cold tier.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def blocks_per_batch(order: np.ndarray, sample_block: np.ndarray, batch: int) -> float:
    blocks = sample_block[order]
    return float(np.mean([len(set(blocks[i:i + batch].tolist())) for i in range(0, len(blocks) - batch + 1, batch)]))


def run(s3, workdir: Path, modes, *, rows: int, rows_per_block: int, row_bytes: int, hot_fraction: float,
        depth: int, batch: int) -> list[dict]:
    from torch.utils.data import DataLoader

    from tierload import TieredDataset, collate
    from tierload.deploy.runtime import stop_actors

    fs = s3.create_bucket("tradeoff")
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((rows, row_bytes), dtype=np.uint8))
    fs.pipe_file("tradeoff/x.npy", buffer.getvalue())
    fs.invalidate_cache()
    data_bytes = rows * row_bytes
    results = []
    for index, (mode, window) in enumerate(modes):
        config = {"hot": {"dir": str(workdir / f"hot{index}"), "capacity_bytes": int(data_bytes * hot_fraction)},
                  "warm": {"url": None}, "manifest": {"cache_dir": str(workdir / "manifests"),
                                                      "block_bytes": rows_per_block * row_bytes},
                  "prefetch": {"depth_blocks": depth}}
        dataset = TieredDataset("s3://tradeoff", config, shuffle=mode, window_blocks=window or 8,
                                batch_size=batch, storage_options=s3.storage_options)
        began = time.perf_counter()
        count = sum(len(b) for b, _ in DataLoader(dataset, batch_size=batch, collate_fn=collate))
        seconds = time.perf_counter() - began
        assert count == rows
        stats = dataset.epoch_stats(0)
        per_batch = blocks_per_batch(dataset.rank_order(0), dataset.manifest.sample_block, batch)
        blocks = len(dataset.manifest.blocks)
        results.append({"mode": mode, "window_blocks": window if mode == "block" else None,
                        "blocks_per_batch": round(per_batch, 2), "decoded_blocks": min(blocks, (window or 8) + 2),
                        "read_amplification": round(stats["cold_bytes"] / data_bytes, 2),
                        "cold_gets": int(stats["cold_gets"]), "seconds": round(seconds, 1)})
        stop_actors(dataset.config)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--rows-per-block", type=int, default=32)
    parser.add_argument("--row-bytes", type=int, default=256)
    parser.add_argument("--hot-fraction", type=float, default=0.1)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    from tierload_tools.s3local import LocalS3

    blocks = args.rows // args.rows_per_block
    modes = [("sample", None), ("block", 1), ("block", 2), ("block", 4), ("block", 8), ("block", blocks)]
    print(json.dumps({"setup": vars(args) | {"blocks": blocks, "data_bytes": args.rows * args.row_bytes}}))
    with LocalS3() as s3, tempfile.TemporaryDirectory() as tmp:
        results = run(s3, Path(tmp), modes, rows=args.rows, rows_per_block=args.rows_per_block,
                      row_bytes=args.row_bytes, hot_fraction=args.hot_fraction, depth=args.depth, batch=args.batch)
    print("| shuffle | window_blocks | blocks/batch | decoded RAM (blocks) | read amp. | cold GETs |")
    print("|---|---|---|---|---|---|")
    for row in results:
        print(f"| {row['mode']} | {row['window_blocks'] or '-'} | {row['blocks_per_batch']} | "
              f"{row['decoded_blocks']} | {row['read_amplification']} | {row['cold_gets']} |")


if __name__ == "__main__":
    main()
