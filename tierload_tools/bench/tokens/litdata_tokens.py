"""LitData's ``TokensLoader`` on the token workload, run from the peers' environment.

* ``litdata-convert``: ``litdata.optimize(item_loader=TokensLoader())`` writes the token stream's
  windows (read from the emulated S3, ``threads`` ranged GETs in flight) as chunks of whole
  windows to ``setup["litdata_url"]`` on the same S3; timed as the conversion.
* ``litdata-tokens``: ``StreamingDataset(item_loader=TokensLoader(block_size=seq_len + 1),
  shuffle=True, max_cache_size=hot_bytes)`` through LitData's ``StreamingDataLoader``.

Chunks hold whole windows (a chunk's size in tokens is a multiple of ``seq_len + 1``), so
LitData's windows are the stream's windows and the digests can match the other contenders'.

``python -m tierload_tools.bench.tokens.litdata_tokens NAME SETUP_JSON RESULT_JSON`` (the setup as in
:mod:`tierload_tools.bench.tokens.contenders`, plus ``keys``, ``file_tokens``, ``litdata_url``,
``chunk_windows``, ``boto_options``).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import numpy as np

from tierload_tools.bench.small.contenders import main as run_contender
from tierload_tools.bench.small.measure import MemoryWatch
from tierload_tools.bench.tokens.data import TOKEN_DTYPE
from tierload_tools.bench.tokens.measure import token_epochs

_SETUP: dict[str, Any] = {}  # set in the converting process; optimize() forks its workers


def _allow_http() -> None:
    from tierload_tools.bench.contenders.litdata_peer import _allow_http as allow

    allow()


def _ranges(setup: dict[str, Any], start: int, count: int) -> list[tuple[str, int, int]]:
    """``(key, first byte, end byte)`` of the files that hold tokens ``[start, start + count)``."""
    out, offset = [], 0
    for key, tokens in zip(setup["keys"], setup["file_tokens"], strict=True):
        lo, hi = max(start, offset), min(start + count, offset + tokens)
        if lo < hi:
            out.append((key, (lo - offset) * TOKEN_DTYPE.itemsize, (hi - offset) * TOKEN_DTYPE.itemsize))
        offset += tokens
    return out


def _windows(chunk: tuple[int, int]) -> Iterator[Any]:
    """One conversion input (``first window, windows``): its windows as int tensors, one item each."""
    import fsspec
    import torch

    first, count = chunk
    window = _SETUP["seq_len"] + 1
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **_SETUP["storage_options"])
    bucket = _SETUP["url"].removeprefix("s3://").split("/", 1)[0]
    ranges = _ranges(_SETUP, first * window, count * window)
    with ThreadPoolExecutor(16) as pool:
        parts = list(pool.map(lambda r: fs.cat_file(f"{bucket}/{r[0]}", start=r[1], end=r[2]), ranges))
    tokens = np.frombuffer(b"".join(parts), dtype=TOKEN_DTYPE).astype(np.int32).reshape(count, window)
    for row in tokens:
        yield torch.from_numpy(row.copy())


def litdata_convert(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    from litdata import optimize
    from litdata.streaming.item_loader import TokensLoader

    _SETUP.clear()
    _SETUP.update(setup)
    _allow_http()
    window = setup["seq_len"] + 1
    per = setup["chunk_windows"]
    inputs = [(first, min(per, setup["windows"] - first)) for first in range(0, setup["windows"], per)]
    started = time.perf_counter()
    optimize(fn=_windows, inputs=inputs, output_dir=setup["litdata_url"], chunk_size=window * per,
             item_loader=TokensLoader(), num_workers=min(2, len(inputs)), storage_options=setup["boto_options"],
             start_method="fork", verbose=False)
    return {"seconds": time.perf_counter() - started, "chunk_tokens": window * per, "chunks_written": len(inputs)}


def litdata_tokens(setup: dict[str, Any], watch: MemoryWatch) -> dict[str, Any]:
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming.item_loader import TokensLoader

    _allow_http()
    window = setup["seq_len"] + 1

    def streaming_dataset() -> Any:
        return StreamingDataset(input_dir=setup["litdata_url"], item_loader=TokensLoader(block_size=window),
                                shuffle=True, seed=setup["seed"], max_cache_size=setup["hot_bytes"],
                                cache_dir=os.path.join(setup["workdir"], "litdata-cache"),
                                storage_options=setup["boto_options"])

    started = time.perf_counter()
    dataset = streaming_dataset()
    setup_s = time.perf_counter() - started

    def for_epoch(epoch: int) -> Any:
        # a dataset and loader per epoch (on the same cache directory): with one loader, LitData 0.2.76's
        # TokensLoader failed in a worker on the quick size's second epoch (KeyError in TokensLoader.close,
        # as the reader moves to the next chunk). At 128 MiB the same KeyError came in epoch 1 regardless.
        epoch_dataset = dataset if epoch == 0 else streaming_dataset()
        epoch_dataset.set_epoch(epoch + 1)
        return StreamingDataLoader(epoch_dataset, batch_size=setup["batch_size"], num_workers=setup["num_workers"])

    return {"setup_s": setup_s, "windows": len(dataset),
            "epochs": token_epochs(setup["epochs"], window, for_epoch, setup["endpoint_url"]),
            "notes": f"chunks of {setup['chunk_windows']} windows, max_cache_size {setup['hot_bytes'] / 1e6:.0f} MB"}


CONTENDERS = {"litdata-convert": litdata_convert, "litdata-tokens": litdata_tokens}


if __name__ == "__main__":
    sys.exit(run_contender(sys.argv[1:], CONTENDERS))
