"""Zstandard compression of block bytes, and the judgement of whether it pays.

Data that does not compress (JPEG, compressed Parquet pages) is kept raw: compressing it
only costs CPU. Bytes are compressed when ``raw_size / compressed_size >= min_ratio``.
The frame encoder (:func:`tierload.frames.blockfile.encode_frame`) is the one caller that decides.
"""

from __future__ import annotations

import threading

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


def zstd_compress(data: bytes | memoryview, level: int) -> bytes:
    """Compress with zstd at ``level`` (frames carry their content size)."""
    return _compressor(level).compress(data)


def zstd_content_size(data: bytes | memoryview) -> int:
    """The decompressed size a zstd frame declares in its header, or -1 if it declares none.

    Raises:
        CodecError: ``data`` does not start with a zstd frame header (a ``ValueError``).
    """
    try:
        return zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CodecError(f"not a zstd frame: {exc}") from exc


def zstd_decompress(data: bytes | memoryview, raw_size: int) -> bytes:
    """Decompress a zstd frame of known decompressed size ``raw_size`` bytes.

    Raises:
        CodecError: ``data`` is not a valid zstd frame (a ``ValueError``); the frame decoder
            turns it into an :class:`~tierload.errors.IntegrityError`.
    """
    try:
        return _decompressor().decompress(data, max_output_size=max(raw_size, 1))
    except zstandard.ZstdError as exc:
        raise CodecError(f"zstd payload does not decode: {exc}") from exc


# Compressibility is judged from a sample before a large block is compressed whole: JPEG or
# already-compressed Parquet would otherwise cost a full zstd pass per send (0.41 ms per
# 256 KiB JPEG at level 3 here, a third of the node cache's CPU when the warm tier serves an
# epoch) to learn that it does not compress. The same idea as Btrfs's compression heuristic
# (fs/btrfs/compression.c), which samples an extent before compressing it.
SAMPLE_CHUNK_BYTES = 8 * 1024
SAMPLE_CHUNKS = 4
SAMPLE_MIN_BLOCK_BYTES = 4 * SAMPLE_CHUNKS * SAMPLE_CHUNK_BYTES  # smaller blocks: compressed whole
MIN_COMPRESS_BYTES = 64  # below this, a zstd frame's own overhead eats any gain


def _sample(data: bytes | memoryview) -> bytes:
    """:data:`SAMPLE_CHUNKS` chunks of :data:`SAMPLE_CHUNK_BYTES`, spread evenly over ``data``."""
    step = len(data) // SAMPLE_CHUNKS
    view = memoryview(data)
    return b"".join(view[i * step:i * step + SAMPLE_CHUNK_BYTES] for i in range(SAMPLE_CHUNKS))


def compress_if_it_pays(data: bytes | memoryview, level: int, min_ratio: float) -> bytes | None:
    """``data`` zstd-compressed, or None when compressing it does not pay.

    A block of :data:`SAMPLE_MIN_BLOCK_BYTES` or more is first judged by a sample
    (:func:`_sample`): if the sample compresses by less than ``sqrt(min_ratio)`` (a margin,
    since a small sample compresses a little worse than the whole), the block stays raw
    without a full pass. A block whose only compressible parts the sample misses then stays
    raw: its bytes are still exact, only the copy is larger.

    Args:
        data: Raw block bytes.
        level: zstd level (1-22, negative for the fast modes).
        min_ratio: Smallest raw/compressed ratio worth keeping compressed (>= 1.0).

    Returns:
        The compressed bytes (strictly smaller than ``data`` and at least ``min_ratio`` times
        smaller), or None.
    """
    if len(data) < MIN_COMPRESS_BYTES:
        return None
    if len(data) >= SAMPLE_MIN_BLOCK_BYTES:
        sample = _sample(data)
        if len(sample) < min_ratio ** 0.5 * len(zstd_compress(sample, level)):
            return None
    packed = zstd_compress(data, level)
    if len(packed) < len(data) and len(data) >= min_ratio * len(packed):
        return packed
    return None
