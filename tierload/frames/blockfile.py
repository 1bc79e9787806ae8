"""The one shape of a block's bytes: a frame, a 40-byte header then the payload.

A frame is what a tier stores, what a node cache hands a consumer over its channel, what a
peer node returns and what is written to the warm tier; moving a block copies its frame and
re-encodes it only where the destination stores another codec (:func:`recode`).

Header (little-endian): magic ``b"TLB1"``, codec (0 raw, 1 zstd), 3 reserved bytes,
xxh3-64 of the block key, raw size, stored size, checksum of the raw bytes. The checksum
is the one taken when the block left the cold tier; it travels with the block into every
tier, so a copy read from warm or hot is verified against the original bytes. The key
hash catches a file stored under the wrong name; the sizes catch truncation. The checksum
is keyed with the deployment's secret (``secret=``, :mod:`tierload.frames.checksum_key`): a file
with a valid header but bytes tierload did not write fails its check like any corrupt copy.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import xxhash

from tierload.errors import CodecError, IntegrityError
from tierload.frames.checksum import checksum
from tierload.frames.codec import compress_if_it_pays, zstd_content_size, zstd_decompress

_MAGIC = b"TLB1"
_HEADER = struct.Struct("<4sB3xQQQQ")
HEADER_SIZE = _HEADER.size
PAYLOAD_OFFSET = HEADER_SIZE  # the payload follows the header directly
_CODEC_IDS = {"raw": 0, "zstd": 1}
_CODEC_NAMES = {number: name for name, number in _CODEC_IDS.items()}


@dataclass(frozen=True)
class FrameHeader:
    """Parsed header of a frame (sizes in bytes).

    Attributes:
        codec: ``"raw"`` or ``"zstd"``: how the payload is stored.
        key_hash: xxh3-64 of the block key.
        raw_size: Size of the block once decoded.
        stored_size: Size of the payload as stored (equals ``raw_size`` for ``"raw"``).
        checksum: xxh3-64 of the raw bytes, taken when the block left the cold tier.
    """

    codec: str
    key_hash: int
    raw_size: int
    stored_size: int
    checksum: int


@dataclass(frozen=True)
class FrameFormat:
    """The codec a tier (or the channel) stores frames in.

    Attributes:
        zstd_level: zstd level to compress payloads with where it pays, or None to keep
            every payload raw.
        min_ratio: Smallest raw/compressed ratio worth storing compressed (>= 1.0); 1.0
            compresses whatever gets smaller.
    """

    zstd_level: int | None = None
    min_ratio: float = 1.0

    @property
    def compresses(self) -> bool:
        """Whether payloads are compressed where it pays."""
        return self.zstd_level is not None


RAW = FrameFormat()  # every payload raw: the hot tier's format


def _key_hash(key: str) -> int:
    return xxhash.xxh3_64_intdigest(key.encode("utf-8"))


def raw_frame_header(key: str, raw_size: int, digest: int) -> bytes:
    """The :data:`HEADER_SIZE` bytes that precede ``raw_size`` raw payload bytes of ``key``.

    For a frame written in pieces (a block streamed to a file): the payload follows the header
    unchanged, so the header can be written last, once the checksum of the payload is known.

    Args:
        key: The block key.
        raw_size: The payload's size in bytes.
        digest: The checksum of the payload (:mod:`tierload.frames.checksum`).
    """
    return _HEADER.pack(_MAGIC, _CODEC_IDS["raw"], _key_hash(key), raw_size, raw_size, digest)


def _pack(key: str, codec: str, raw_size: int, payload: bytes | memoryview, digest: int) -> bytes:
    header = _HEADER.pack(_MAGIC, _CODEC_IDS[codec], _key_hash(key), raw_size, len(payload), digest)
    return b"".join((header, payload))


def encode_frame(key: str, raw: bytes | memoryview, digest: int | None = None,
                 fmt: FrameFormat = RAW, *, secret: bytes | None = None) -> bytes:
    """Frame raw block bytes.

    Args:
        key: The block key the frame belongs to.
        raw: The block's bytes as they came from the cold tier.
        digest: The checksum recorded when the block left the cold tier (computed with
            ``secret`` if None).
        fmt: The destination's format; with ``fmt.zstd_level`` the payload is stored zstd
            when that pays (:func:`tierload.frames.codec.compress_if_it_pays`), raw otherwise.
        secret: The deployment's checksum key (None: unkeyed xxh3-64).

    Returns:
        Header + payload bytes.
    """
    digest = checksum(raw, secret) if digest is None else digest
    if fmt.zstd_level is not None:
        packed = compress_if_it_pays(raw, fmt.zstd_level, fmt.min_ratio)
        if packed is not None:
            return _pack(key, "zstd", len(raw), packed, digest)
    return _pack(key, "raw", len(raw), raw, digest)


def parse_header(key: str, data: bytes | memoryview, *, frame_size: int | None = None) -> FrameHeader:
    """Parse and sanity-check the header of a frame (the payload is not read).

    Args:
        key: The block key the frame must belong to.
        data: The frame, or at least its first :data:`HEADER_SIZE` bytes.
        frame_size: The whole frame's size when ``data`` holds only its start (e.g. a file's
            size); None when ``data`` is the whole frame.

    Raises:
        IntegrityError: Wrong magic, key or codec, or sizes that do not match.
    """
    if len(data) < HEADER_SIZE:
        raise IntegrityError(f"stored block is {len(data)} bytes, shorter than its header", key=key)
    magic, codec, key_hash, raw_size, stored_size, digest = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC or codec not in _CODEC_NAMES:
        raise IntegrityError("stored block has no tierload header (foreign or corrupt file)", key=key)
    if key_hash != _key_hash(key):
        raise IntegrityError("stored block belongs to a different key", key=key)
    payload_size = (len(data) if frame_size is None else frame_size) - HEADER_SIZE
    if payload_size != stored_size:
        raise IntegrityError(f"stored block is truncated or padded: {payload_size} payload "
                             f"bytes, header says {stored_size}", key=key)
    if _CODEC_NAMES[codec] == "raw" and raw_size != stored_size:
        raise IntegrityError(f"raw block header says {raw_size} raw bytes but {stored_size} stored", key=key)
    return FrameHeader(_CODEC_NAMES[codec], key_hash, raw_size, stored_size, digest)


def _raw_payload(key: str, header: FrameHeader, payload: memoryview) -> bytes | memoryview:
    if header.codec == "raw":
        return payload
    try:
        declared = zstd_content_size(payload)
        if declared not in (-1, header.raw_size):  # checked first: a corrupt size must not size a buffer
            raise IntegrityError(f"zstd payload declares {declared} raw bytes, header says {header.raw_size}",
                                 key=key)
        return zstd_decompress(payload, header.raw_size)
    except CodecError as exc:
        raise IntegrityError(f"zstd payload does not decode ({exc})", key=key) from exc


def check_payload(key: str, header: FrameHeader, raw: bytes | bytearray | memoryview,
                  secret: bytes | None) -> None:
    """Check a block's raw bytes against the checksum in its frame's header.

    Args:
        key: The block key (for the error).
        header: The frame's parsed header.
        raw: The decoded bytes (hashed in place).
        secret: The deployment's checksum key (None: unkeyed xxh3-64).

    Raises:
        IntegrityError: Wrong size, or the bytes do not match the checksum.
    """
    if memoryview(raw).nbytes != header.raw_size or checksum(raw, secret) != header.checksum:
        raise IntegrityError("stored block does not match the checksum taken when it left the cold tier",
                             key=key)


def _verified_raw(key: str, frame: bytes | memoryview,
                  secret: bytes | None) -> tuple[FrameHeader, bytes | memoryview]:
    header = parse_header(key, frame)
    raw = _raw_payload(key, header, memoryview(frame)[HEADER_SIZE:])
    check_payload(key, header, raw, secret)
    return header, raw


def decode_frame(key: str, frame: bytes | memoryview, *, secret: bytes | None = None) -> tuple[bytes, int]:
    """Verify a frame (with the deployment's ``secret``, see :func:`encode_frame`) and return
    ``(raw_bytes, checksum)``.

    Raises:
        IntegrityError: The header is wrong, the payload does not decode (bad zstd, wrong
            codec byte) or does not match its checksum: any copy that does not decode is corrupt.
    """
    header, raw = _verified_raw(key, frame, secret)
    return bytes(raw), header.checksum


def decode_frame_file(key: str, path: str | os.PathLike, *, secret: bytes | None = None) -> bytes:
    """Verify the frame stored in the file ``path`` and return the block's raw bytes, as
    :func:`decode_frame` does for a frame in memory.

    A raw payload is read straight into the bytes returned (one buffer, no copy of the whole
    frame): reading an 8 MiB frame and then copying its payload out cost ~25 ms on our 2-core
    machine (fresh pages for two 8 MiB buffers), ~10x the read alone.

    Raises:
        FileNotFoundError: There is no such file.
        IntegrityError: As :func:`decode_frame`, or the file changed size while it was read.
    """
    with open(path, "rb") as handle:  # buffered: read(n) loops past a short read (> 2 GiB)
        head = handle.read(HEADER_SIZE)
        header = parse_header(key, head, frame_size=os.fstat(handle.fileno()).st_size)
        payload = handle.read(header.stored_size) if header.stored_size else b""
    if len(payload) != header.stored_size:
        raise IntegrityError(f"stored block shrank while it was read: {len(payload)} of {header.stored_size} "
                             "payload bytes", key=key)
    raw = payload if header.codec == "raw" else bytes(_raw_payload(key, header, memoryview(payload)))
    check_payload(key, header, raw, secret)
    return raw


def verify_frame(key: str, frame: bytes | memoryview, *, secret: bytes | None = None) -> FrameHeader:
    """Check a frame against its checksum without copying it (a raw payload is hashed in place).

    Returns:
        The frame's header.

    Raises:
        IntegrityError: As :func:`decode_frame`.
    """
    return _verified_raw(key, frame, secret)[0]


def recode(key: str, frame: bytes, fmt: FrameFormat, *, secret: bytes | None = None) -> bytes:
    """``frame`` in the codec of a destination whose format is ``fmt``; the same bytes when
    its codec already is that format's (nothing is decoded or re-encoded then).

    A raw frame is compressed for a compressing format only when that pays; a zstd frame is
    decoded (and so verified, with the deployment's ``secret``) for a raw format. The
    checksum is carried, never recomputed.

    Raises:
        IntegrityError: The header is wrong, or a zstd payload that must be decoded is corrupt.
    """
    header = parse_header(key, frame)
    if header.codec == "raw" and fmt.zstd_level is not None:
        packed = compress_if_it_pays(memoryview(frame)[HEADER_SIZE:], fmt.zstd_level, fmt.min_ratio)
        return frame if packed is None else _pack(key, "zstd", header.raw_size, packed, header.checksum)
    if header.codec == "zstd" and fmt.zstd_level is None:
        raw, digest = decode_frame(key, frame, secret=secret)
        return _pack(key, "raw", len(raw), raw, digest)
    return frame
