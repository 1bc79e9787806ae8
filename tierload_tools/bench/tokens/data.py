"""The token corpus of the token workload, and the windows every contender must read.

* :func:`token_files`: ``files`` raw little-endian uint16 files of ``tokens_per_file`` seeded
  random tokens each (``<root>/tokens-<n:04d>.bin``), written once and cached.
* :func:`stored_tokens`: the same files as a stored bucket the emulated S3 serves itself (keys
  ``<prefix>/tokens-<n:04d>.bin``), so 2 GiB need no upload into moto.
* :class:`TokenStream`: the files as one token stream in listing order, cut into windows of
  ``seq_len + 1`` tokens back to back; the tail that fills no window is dropped. These are the
  windows of ``TieredDataset(layout="tokens")`` with its defaults (``token_cross_files: true``).
* :class:`WindowDigest`: an order-independent digest of the windows an epoch delivered, so
  contenders that shuffle differently can be checked to read the same windows.

Numpy and the standard library only: the peers' environment imports this module too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from tierload_tools.bench.own_buckets import is_stored_bucket, write_stored_bucket

TOKEN_DTYPE = np.dtype("<u2")
VOCAB = 50_257  # GPT-2's vocabulary: token ids fit uint16
_MARKER = ".complete"


def file_name(n: int) -> str:
    return f"tokens-{n:04d}.bin"


def _tokens(n: int, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, n]).integers(0, VOCAB, count, dtype=np.uint16).astype(TOKEN_DTYPE)


def token_files(root: str | os.PathLike, files: int, tokens_per_file: int, seed: int = 0) -> list[Path]:
    """The corpus's files below ``root`` (written on first use), in listing order.

    Args:
        root: Parent directory of the corpus.
        files: Number of files.
        tokens_per_file: uint16 tokens per file (2 bytes each).
        seed: Seed of the tokens.
    """
    directory = Path(root) / f"tokens-{files}x{tokens_per_file}-s{seed}"
    paths = [directory / file_name(n) for n in range(files)]
    marker = directory.with_name(directory.name + _MARKER)
    if not marker.exists():
        directory.mkdir(parents=True, exist_ok=True)
        for n, path in enumerate(paths):
            _tokens(n, tokens_per_file, seed).tofile(path)
        marker.write_text("", encoding="utf-8")
    return paths


def stored_tokens(root: str | os.PathLike, paths: Sequence[Path], prefix: str) -> Path:
    """A stored bucket of ``paths`` (keys ``<prefix>/<file name>``), written on first use."""
    directory = Path(root) / f"{paths[0].parent.name}-bucket-{prefix}"
    if not is_stored_bucket(directory):
        write_stored_bucket(directory, ((f"{prefix}/{path.name}", path.read_bytes()) for path in paths))
    return directory


class TokenStream:
    """Files of uint16 tokens as one stream, cut into windows of ``window`` tokens.

    Files are memory-mapped on first use in each process (never pickled with the object), so a
    DataLoader worker maps them itself.

    Args:
        paths: The token files, in listing order.
        window: Tokens per window (``seq_len + 1``).
    """

    def __init__(self, paths: Sequence[str | os.PathLike], window: int) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self.window = window
        sizes = [os.path.getsize(p) // TOKEN_DTYPE.itemsize for p in self.paths]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # token offset of each file
        self.windows = int(self.starts[-1]) // window
        self._maps: list[np.ndarray] | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_maps": None}

    def tokens(self, start: int, count: int) -> np.ndarray:
        """Tokens ``[start, start + count)`` of the stream, as uint16 (a copy when they span files)."""
        if self._maps is None:
            self._maps = [np.memmap(p, dtype=TOKEN_DTYPE, mode="r") for p in self.paths]
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        parts, end = [], start + count
        while start < end:
            offset = start - int(self.starts[first])
            take = min(end - start, len(self._maps[first]) - offset)
            parts.append(self._maps[first][offset:offset + take])
            start, first = start + take, first + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def window_tokens(self, index: int) -> np.ndarray:
        """Window ``index``: tokens ``[index * window, (index + 1) * window)``."""
        return self.tokens(index * self.window, self.window)

    def chunks(self, windows_per_chunk: int) -> Iterator[tuple[int, int]]:
        """``(first window, window count)`` of consecutive runs of windows covering all of them."""
        for first in range(0, self.windows, windows_per_chunk):
            yield first, min(windows_per_chunk, self.windows - first)


class WindowDigest:
    """Digest of a set of windows, independent of their order.

    Each window hashes to ``sum_j (token_j + 1) * c_j mod 2**64`` (``c_j`` fixed odd 64-bit
    numbers: a window with any token changed or moved hashes differently); the digest is the sum
    of the windows' hashes mod 2**64 with their count, so two epochs that read the same windows in
    any order have the same digest.

    Args:
        window: Tokens per window.
    """

    def __init__(self, window: int) -> None:
        self.coefficients = np.random.default_rng(23).integers(0, 2**63, window, dtype=np.uint64) * np.uint64(2) \
            + np.uint64(1)
        self.total = np.uint64(0)
        self.windows = 0

    def add(self, batch: np.ndarray) -> None:
        """Add a ``(windows, window)`` array of tokens (any integer dtype)."""
        values = batch.astype(np.uint64, copy=False) + np.uint64(1)
        with np.errstate(over="ignore"):
            self.total += (values * self.coefficients).sum(axis=1, dtype=np.uint64).sum(dtype=np.uint64)
        self.windows += len(batch)

    def hexdigest(self) -> str:
        return f"{self.windows}:{int(self.total):016x}"
