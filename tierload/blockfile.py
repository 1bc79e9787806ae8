"""The on-tier format of a block: a 40-byte header, then the payload.

Header (little-endian): magic ``b"TLB1"``, codec (0 raw, 1 zstd), 3 reserved bytes,
xxh3-64 of the block key, raw size, stored size, xxh3-64 of the raw bytes. The checksum
is the one taken when the block left the cold tier; it travels with the block into every
tier, so a copy read from warm or hot is verified against the original bytes. The key
hash catches a file stored under the wrong name; the sizes catch truncation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import xxhash

from tierload.checksum import checksum
from tierload.codec import zstd_compress, zstd_decompress
from tierload.errors import IntegrityError

MAGIC = b"TLB1"
HEADER = struct.Struct("<4sB3xQQQQ")
HEADER_SIZE = HEADER.size
_CODECS = {0: "raw", 1: "zstd"}


@dataclass(frozen=True)
class BlockHeader:
    """Parsed header of a stored block (sizes in bytes)."""

    codec: str
    key_hash: int
    raw_size: int
    stored_size: int
    checksum: int


def _key_hash(key: str) -> int:
    return xxhash.xxh3_64_intdigest(key.encode("utf-8"))


def encode_block(key: str, raw: bytes, *, raw_checksum: int | None = None,
                 compress_level: int | None = None) -> bytes:
    """Frame raw block bytes for storage in a tier.

    Args:
        key: The block key the file will be stored under.
        raw: The block's bytes as they came from the cold tier.
        raw_checksum: xxh3-64 recorded when the block left the cold tier (computed if None).
        compress_level: zstd level to store compressed, or None to store raw.

    Returns:
        Header + payload bytes.
    """
    digest = checksum(raw) if raw_checksum is None else raw_checksum
    codec, payload = 0, raw
    if compress_level is not None and raw:
        packed = zstd_compress(raw, compress_level)
        if len(packed) < len(raw):
            codec, payload = 1, packed
    header = HEADER.pack(MAGIC, codec, _key_hash(key), len(raw), len(payload), digest)
    return header + bytes(payload)


def parse_header(key: str, data: bytes | memoryview) -> BlockHeader:
    """Parse and sanity-check the header of a stored block.

    Raises:
        IntegrityError: Wrong magic, key, codec, or a stored size that does not match.
    """
    if len(data) < HEADER_SIZE:
        raise IntegrityError(f"stored block is {len(data)} bytes, shorter than its header", key=key)
    magic, codec, key_hash, raw_size, stored_size, digest = HEADER.unpack_from(data, 0)
    if magic != MAGIC or codec not in _CODECS:
        raise IntegrityError("stored block has no tierload header (foreign or corrupt file)", key=key)
    if key_hash != _key_hash(key):
        raise IntegrityError("stored block belongs to a different key", key=key)
    if len(data) - HEADER_SIZE != stored_size:
        raise IntegrityError(f"stored block is truncated or padded: {len(data) - HEADER_SIZE} payload "
                             f"bytes, header says {stored_size}", key=key)
    return BlockHeader(_CODECS[codec], key_hash, raw_size, stored_size, digest)


def decode_block(key: str, data: bytes | memoryview) -> tuple[bytes, int]:
    """Verify a stored block and return ``(raw_bytes, checksum)``.

    Raises:
        IntegrityError: The header is wrong or the payload does not match its checksum.
    """
    header = parse_header(key, data)
    payload = memoryview(data)[HEADER_SIZE:]
    raw = zstd_decompress(bytes(payload), header.raw_size) if header.codec == "zstd" else payload
    if len(raw) != header.raw_size or checksum(raw) != header.checksum:
        raise IntegrityError("stored block does not match the checksum taken when it left the cold tier",
                             key=key)
    return bytes(raw), header.checksum
