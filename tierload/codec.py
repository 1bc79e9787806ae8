"""Zstandard compression of block bytes that travel between processes ("on the wire").

Data that does not compress (JPEG, compressed Parquet pages) is sent raw: compressing it
only costs CPU. A payload is compressed when ``raw_size / compressed_size >= min_ratio``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import zstandard

from tierload.errors import CodecError

_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level)
    return cache[level]


def _decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_local, "decompressor"):
        _local.decompressor = zstandard.ZstdDecompressor()
    return _local.decompressor


@dataclass(frozen=True)
class WirePayload:
    """Block bytes as sent between processes.

    Attributes:
        codec: ``"zstd"`` or ``"raw"``.
        data: The bytes as sent.
        raw_size: Size in bytes once decoded.
    """

    codec: str
    data: bytes
    raw_size: int

    @property
    def ratio(self) -> float:
        """raw_size / sent size (1.0 for raw or empty payloads)."""
        return self.raw_size / len(self.data) if self.data and self.codec == "zstd" else 1.0


def zstd_compress(data: bytes, level: int) -> bytes:
    """Compress with zstd at ``level`` (frames carry their content size)."""
    return _compressor(level).compress(data)


def zstd_decompress(data: bytes, raw_size: int) -> bytes:
    """Decompress a zstd frame of known decompressed size ``raw_size`` bytes."""
    return _decompressor().decompress(data, max_output_size=max(raw_size, 1))


# Compressibility is judged from a sample before a large block is compressed whole: JPEG or
# already-compressed Parquet would otherwise cost a full zstd pass per send (0.41 ms per
# 256 KiB JPEG at level 3 here, a third of the node cache's CPU when the warm tier serves an
# epoch) to learn that it does not compress. The same idea as Btrfs's compression heuristic
# (fs/btrfs/compression.c), which samples an extent before compressing it.
SAMPLE_CHUNK_BYTES = 8 * 1024
SAMPLE_CHUNKS = 4
SAMPLE_MIN_BLOCK_BYTES = 4 * SAMPLE_CHUNKS * SAMPLE_CHUNK_BYTES  # smaller blocks: compressed whole


def _sample(data: bytes) -> bytes:
    """:data:`SAMPLE_CHUNKS` chunks of :data:`SAMPLE_CHUNK_BYTES`, spread evenly over ``data``."""
    step = len(data) // SAMPLE_CHUNKS
    view = memoryview(data)
    return b"".join(view[i * step:i * step + SAMPLE_CHUNK_BYTES] for i in range(SAMPLE_CHUNKS))


def encode(data: bytes, level: int, min_ratio: float) -> WirePayload:
    """Compress ``data`` for the wire, or keep it raw when it does not compress.

    A block of :data:`SAMPLE_MIN_BLOCK_BYTES` or more is first judged by a sample
    (:func:`_sample`): if the sample compresses by less than ``sqrt(min_ratio)`` (a margin,
    since a small sample compresses a little worse than the whole), the block is sent raw
    without a full pass. A block whose only compressible parts the sample misses is then sent
    raw: its bytes are still exact, only the transfer is larger.

    Args:
        data: Raw block bytes.
        level: zstd level (1-22, negative for the fast modes).
        min_ratio: Smallest raw/compressed ratio worth sending compressed (>= 1.0).
    """
    if len(data) < 64:
        return WirePayload("raw", bytes(data), len(data))
    if len(data) >= SAMPLE_MIN_BLOCK_BYTES:
        sample = _sample(data)
        if len(sample) < min_ratio ** 0.5 * len(zstd_compress(sample, level)):
            return WirePayload("raw", bytes(data), len(data))
    packed = zstd_compress(data, level)
    if len(data) >= min_ratio * len(packed):
        return WirePayload("zstd", packed, len(data))
    return WirePayload("raw", bytes(data), len(data))


def decode(payload: WirePayload) -> bytes:
    """Return the raw bytes of a :class:`WirePayload`.

    Raises:
        CodecError: Unknown codec, or the decoded size differs from ``raw_size`` (a ``ValueError``).
    """
    if payload.codec == "raw":
        data = payload.data
    elif payload.codec == "zstd":
        data = zstd_decompress(payload.data, payload.raw_size)
    else:
        raise CodecError(f"unknown wire codec {payload.codec!r}; expected 'zstd' or 'raw'")
    if len(data) != payload.raw_size:
        raise CodecError(f"wire payload decoded to {len(data)} bytes, expected {payload.raw_size}")
    return data
