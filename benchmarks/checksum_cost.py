"""What the keyed checksum costs on the hot path: keyed BLAKE3 against unkeyed xxh3-64, same buffers.

Three measurements per block size, each keyed and unkeyed on the same bytes, interleaved so
that a loaded machine slows both alike (compare the ratios, not the absolute figures):

* ``hash``: :func:`tierload.frames.checksum.checksum` alone;
* ``verify``: :func:`tierload.frames.blockfile.verify_frame` of a raw frame in memory (the node
  cache's check before it hands a frame on);
* ``hot_read``: what a consumer does for a hot hit (:meth:`BlockReader._read_hot`): read the
  block file from a hot directory (page cache) and decode it to the block's bytes;
* ``hot_read_frame``: the consumer's path before ``decode_frame_file``: read the whole frame
  into memory, then verify it and copy its payload out (:func:`decode_frame`).

Each cell is the median wall time of ``--repeats`` calls, in ms, and the mean CPU time per call
(all threads: a threaded hash spends no less CPU, it spends it on more cores). On a loaded
machine a call of a few ms is preempted and its wall time counts other processes' turns: the
CPU times and their ratio are the figures to compare there.

Run: ``python benchmarks/checksum_cost.py [--repeats 30]`` (prints a table, then one JSON line).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

from tierload.frames.blockfile import decode_frame, encode_frame, verify_frame
from tierload.frames.checksum import checksum, threads_for
from tierload.loader.consumer import BlockReader
from tierload.stores.local import LocalDirStore

SIZES = (4 << 10, 64 << 10, 1 << 20, 8 << 20)
SECRET = bytes(range(32))


def _timed(call, repeats: int) -> tuple[float, float]:
    """(median wall ms, mean CPU ms) of ``repeats`` calls after one warm-up call."""
    call()
    walls, cpu0 = [], time.process_time()
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls) * 1e3, (time.process_time() - cpu0) / repeats * 1e3


def _hot_reader(root: Path, secret: bytes | None) -> BlockReader:
    """A BlockReader over ``root`` without a node cache (only its hot-hit path is used)."""
    reader = BlockReader.__new__(BlockReader)
    reader.levels = [LocalDirStore(root, tier="hot", check=False)]
    reader.secret = secret
    return reader


def measure(size: int, repeats: int, root: Path) -> dict:
    """Keyed and unkeyed timings of the three measurements for one block size."""
    data = os.urandom(size)
    key_plain, key_keyed = f"block-{size:032x}", f"block-{size + 1:032x}"  # valid tier keys
    frames = {None: encode_frame(key_plain, data), SECRET: encode_frame(key_keyed, data, secret=SECRET)}
    store = LocalDirStore(root, tier="hot", check=False)
    store.write(key_plain, frames[None])
    store.write(key_keyed, frames[SECRET])
    readers = {secret: _hot_reader(root, secret) for secret in (None, SECRET)}
    names = {None: key_plain, SECRET: key_keyed}
    calls = {
        "hash": lambda secret: checksum(data, secret),
        "verify": lambda secret: verify_frame(names[secret], frames[secret], secret=secret),
        "hot_read": lambda secret: readers[secret]._read_hot(names[secret], readers[secret].levels),
        "hot_read_frame": lambda secret: decode_frame(names[secret], store.read(names[secret]), secret=secret),
    }
    row: dict = {"size": size}
    for name, call in calls.items():
        plain = keyed = (0.0, 0.0)
        for _ in range(3):  # interleaved thirds: load on the machine hits both alike
            plain_part = _timed(partial(call, None), max(1, repeats // 3))
            keyed_part = _timed(partial(call, SECRET), max(1, repeats // 3))
            plain = (plain[0] + plain_part[0] / 3, plain[1] + plain_part[1] / 3)
            keyed = (keyed[0] + keyed_part[0] / 3, keyed[1] + keyed_part[1] / 3)
        row[name] = {"unkeyed_ms": round(plain[0], 4), "keyed_ms": round(keyed[0], 4),
                     "unkeyed_cpu_ms": round(plain[1], 4), "keyed_cpu_ms": round(keyed[1], 4),
                     "ratio": round(keyed[0] / plain[0], 2), "cpu_ratio": round(keyed[1] / max(plain[1], 1e-9), 2)}
    assert readers[SECRET]._read_hot(key_keyed, readers[SECRET].levels)[0] == data
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(size, args.repeats, Path(tmp)) for size in SIZES]
    print(f"{'size':>8} | {'what':<14} | {'unkeyed ms':>10} | {'keyed ms':>9} | ratio | {'unkeyed CPU':>11} | "
          f"{'keyed CPU':>9} | CPU ratio")
    for row in rows:
        for name in ("hash", "verify", "hot_read", "hot_read_frame"):
            cell = row[name]
            print(f"{row['size']:>8} | {name:<14} | {cell['unkeyed_ms']:>10.3f} | {cell['keyed_ms']:>9.3f} | "
                  f"{cell['ratio']:>4.1f}x | {cell['unkeyed_cpu_ms']:>11.3f} | {cell['keyed_cpu_ms']:>9.3f} | "
                  f"{cell['cpu_ratio']:.1f}x")
    print(json.dumps({"cpus": os.cpu_count(), "load": os.getloadavg()[0],
                      "threads_8MiB": "auto" if threads_for(8 << 20) != 1 else 1, "rows": rows}))


if __name__ == "__main__":
    main()
