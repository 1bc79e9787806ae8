"""The loop every token contender runs, and what it measures per epoch.

The loop takes each batch of windows (an ``(windows, seq_len + 1)`` integer tensor, or a
``(windows, labels)`` pair) and adds it to the epoch's :class:`~tierload_tools.bench.tokens.data.WindowDigest`:
that is its only work, the same for every contender (no simulated compute), so samples/s (a
sample is a window) is the loader's rate with a small consumer. S3 traffic comes from the emulated
S3's counters before and after each epoch (none for a local loader).

Imported from the peers' environment too: numpy, the standard library and the bench's own
stdlib-only modules.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable, Iterable

from tierload_tools.bench.emulated_s3 import read_counters
from tierload_tools.bench.loop import s3_delta
from tierload_tools.bench.tokens.data import WindowDigest


def _windows_of(batch: Any):
    windows = batch[0] if isinstance(batch, (tuple, list)) else batch
    return windows.numpy() if hasattr(windows, "numpy") else windows


def token_epochs(epochs: int, window: int, loader_for_epoch: Callable[[int], Iterable],
                 endpoint_url: str | None = None,
                 epoch_extra: Callable[[int], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Take every batch of ``epochs`` epochs; one row per epoch.

    Args:
        epochs: Epochs.
        window: Tokens per window (``seq_len + 1``).
        loader_for_epoch: The iterable of batches of an epoch.
        endpoint_url: The emulated S3, for its counters (None: no S3 traffic is counted).
        epoch_extra: Called after each epoch; its dict is merged into the epoch's row.

    Returns:
        One dict per epoch: ``epoch, samples`` (windows), ``tokens, seconds, samples_per_s`` (windows/s),
        ``tokens_per_s, digest``
        (:meth:`WindowDigest.hexdigest`), ``s3_gets, s3_bytes, s3`` (every counter's change), and
        what ``epoch_extra`` adds.

    Raises:
        ValueError: A batch's windows are not ``window`` tokens long.
    """
    rows = []
    for epoch in range(epochs):
        before = read_counters(endpoint_url) if endpoint_url else {}
        digest = WindowDigest(window)
        started = time.perf_counter()
        for batch in loader_for_epoch(epoch):
            windows = _windows_of(batch)
            if windows.ndim != 2 or windows.shape[1] != window:
                raise ValueError(f"a batch of shape {tuple(windows.shape)}: windows must be {window} tokens")
            digest.add(windows)
        seconds = time.perf_counter() - started
        delta = s3_delta(before, read_counters(endpoint_url)) if endpoint_url else {}
        row: dict[str, Any] = {
            "epoch": epoch, "samples": digest.windows, "tokens": digest.windows * window, "seconds": seconds,
            "samples_per_s": digest.windows / seconds if seconds else 0.0,
            "tokens_per_s": digest.windows * window / seconds if seconds else 0.0,
            "digest": digest.hexdigest(), "s3_gets": delta.get("get_requests", 0),
            "s3_bytes": delta.get("get_bytes", 0), "s3": delta}
        if epoch_extra is not None:
            row.update(epoch_extra(epoch))
        rows.append(row)
        print(f"epoch {epoch + 1}: " + json.dumps(row), file=sys.stderr, flush=True)
    return rows
