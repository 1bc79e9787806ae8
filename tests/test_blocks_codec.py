"""Block keys and the one frame of block bytes (stored in tiers, sent to consumers and peers)."""

from __future__ import annotations

import os
import struct
import unicodedata

import pytest

from tierload.errors import IntegrityError
from tierload.frames import codec
from tierload.frames.blockfile import (
    HEADER_SIZE,
    PAYLOAD_OFFSET,
    RAW,
    FrameFormat,
    decode_frame,
    encode_frame,
    parse_header,
    recode,
    verify_frame,
)
from tierload.stores.keys import KEY_PATTERN, block_key, check_key

NASTY_KEYS = [  # B16: special characters, unicode, traversal, very long names
    "imgs/cat [1].jpg", "imgs/a+b.bin", "imgs/50%.bin", "imgs/x?y*z.bin", "imgs/naïve café.bin",
    unicodedata.normalize("NFD", "imgs/naïve café.bin"), "imgs/trailing space ", "imgs/../escape.bin",
    "../../etc/passwd", "a/" + "ü" * 300 + ".png", ".hidden", "..", "with space/and\ttab\nnewline",
]


@pytest.mark.parametrize("name", NASTY_KEYS)
def test_block_keys_are_safe_file_names(name):
    key = block_key(f"s3://bucket/{name}", '"etag"', 0, 10)
    assert KEY_PATTERN.match(key) and check_key(key) == key
    assert "/" not in key and not key.startswith(".") and len(key) <= 73


def test_block_keys_differ_for_distinct_sources_versions_and_ranges():
    keys = {block_key(f"s3://bucket/{name}", '"v1"') for name in NASTY_KEYS}
    assert len(keys) == len(NASTY_KEYS)  # NFC and NFD forms stay distinct
    base = block_key("s3://b/k", '"v1"', 0, 10)
    assert base != block_key("s3://b/k", '"v2"', 0, 10)  # a changed object is a new block
    assert base != block_key("s3://b/k", '"v1"', 10, 10)


@pytest.mark.parametrize("bad", ["../x-" + "0" * 32, "a/b-" + "0" * 32, "", "x", "." + "a" * 5 + "-" + "0" * 32])
def test_check_key_rejects_malformed_keys(bad):
    with pytest.raises(ValueError):
        check_key(bad)


WIRE = FrameFormat(zstd_level=3, min_ratio=1.1)
KEY = block_key("s3://b/k", '"e"')
TEXT = b"the same few words again and again " * 200


@pytest.mark.parametrize("payload", [b"", b"x", os.urandom(5000), b"abc" * 10000])
@pytest.mark.parametrize("level", [None, 3])
def test_block_file_round_trips(payload, level):
    stored = encode_frame(KEY, payload, fmt=FrameFormat(level))
    raw, digest = decode_frame(KEY, stored)
    assert raw == payload
    assert verify_frame(KEY, stored).checksum == digest
    if level is not None and len(payload) > 1000 and payload[:3] == b"abc":
        assert len(stored) < len(payload)  # compressible blocks are stored compressed


def test_block_file_detects_corruption_truncation_and_wrong_key():
    stored = bytearray(encode_frame(KEY, b"hello world" * 100))
    flipped = bytearray(stored)
    flipped[HEADER_SIZE + 5] ^= 0xFF
    with pytest.raises(IntegrityError, match="checksum"):
        decode_frame(KEY, bytes(flipped))
    with pytest.raises(IntegrityError, match="checksum"):
        verify_frame(KEY, bytes(flipped))
    with pytest.raises(IntegrityError, match="truncated"):
        decode_frame(KEY, bytes(stored[:-1]))
    with pytest.raises(IntegrityError, match="different key"):
        decode_frame(block_key("s3://b/other", '"e"'), bytes(stored))
    with pytest.raises(IntegrityError):
        decode_frame(KEY, b"not a block")


def test_frames_compress_what_compresses_and_keep_the_rest_raw():
    packed = encode_frame(KEY, TEXT, fmt=WIRE)
    header = parse_header(KEY, packed)
    assert header.codec == "zstd" and header.raw_size / header.stored_size > 5
    assert decode_frame(KEY, packed)[0] == TEXT
    noise = os.urandom(20000)  # like JPEG: does not compress
    sent = encode_frame(KEY, noise, fmt=WIRE)
    header = parse_header(KEY, sent)
    assert header.codec == "raw" and header.stored_size == header.raw_size == len(noise)
    assert decode_frame(KEY, sent)[0] == noise
    empty = encode_frame(KEY, b"", fmt=WIRE)
    assert parse_header(KEY, empty).codec == "raw" and decode_frame(KEY, empty)[0] == b""
    assert parse_header(KEY, encode_frame(KEY, TEXT)).codec == "raw"  # the raw format never compresses


@pytest.mark.parametrize("kind", ["text", "noise", "noise with a compressible tail"])
def test_large_blocks_are_judged_by_a_sample_and_always_round_trip(kind):
    size = 4 * codec.SAMPLE_MIN_BLOCK_BYTES
    text = (b"the same few words again and again " * (size // 35 + 1))[:size]
    noise = os.urandom(size)
    data = {"text": text, "noise": noise,
            # the last eighth compresses, but no sample chunk falls in it
            "noise with a compressible tail": noise[:size - size // 8] + text[:size // 8]}[kind]
    sent = encode_frame(KEY, data, fmt=WIRE)
    assert decode_frame(KEY, sent)[0] == data
    header = parse_header(KEY, sent)
    assert header.codec == ("zstd" if kind == "text" else "raw")
    if kind == "text":
        assert header.raw_size / header.stored_size > 5


def _with_header_field(frame: bytes, offset: int, fmt: str, value: int) -> bytes:
    forged = bytearray(frame)
    struct.pack_into(fmt, forged, offset, value)
    return bytes(forged)


CODEC_BYTE, RAW_SIZE_FIELD = 4, 16  # offsets in the header: magic(4) codec(1) pad(3) key hash(8) raw size(8)


def test_frame_decode_rejects_size_mismatch_and_unknown_codecs():
    frame = encode_frame(KEY, b"abc")
    with pytest.raises(IntegrityError, match="raw bytes"):
        decode_frame(KEY, _with_header_field(frame, RAW_SIZE_FIELD, "<Q", 4))
    with pytest.raises(IntegrityError, match="no tierload header"):
        decode_frame(KEY, _with_header_field(frame, CODEC_BYTE, "<B", 2))


@pytest.mark.parametrize("data", [b"", b"x" * 3, os.urandom(5000), TEXT])
@pytest.mark.parametrize("fmt", [RAW, WIRE], ids=["raw", "zstd"])
def test_a_flipped_codec_byte_is_an_integrity_error(data, fmt):
    frame = encode_frame(KEY, data, fmt=fmt)
    codec_id = frame[CODEC_BYTE]
    with pytest.raises(IntegrityError):  # never zstandard.ZstdError or ValueError
        decode_frame(KEY, _with_header_field(frame, CODEC_BYTE, "<B", 1 - codec_id))


@pytest.mark.parametrize("where", ["frame header", "block body", "last byte"])
def test_a_corrupt_zstd_payload_is_an_integrity_error(where):
    frame = encode_frame(KEY, TEXT, fmt=WIRE)
    assert parse_header(KEY, frame).codec == "zstd"
    corrupt = bytearray(frame)
    offset = {"frame header": PAYLOAD_OFFSET + 1, "block body": (PAYLOAD_OFFSET + len(frame)) // 2,
              "last byte": len(frame) - 1}[where]
    corrupt[offset] ^= 0xFF
    with pytest.raises(IntegrityError):
        decode_frame(KEY, bytes(corrupt))
    with pytest.raises(IntegrityError):
        verify_frame(KEY, bytes(corrupt))
    with pytest.raises(IntegrityError):
        recode(KEY, bytes(corrupt), RAW)  # decoding for a raw destination finds it too


def test_recode_keeps_the_bytes_when_the_codec_already_fits_and_carries_the_checksum():
    hot = encode_frame(KEY, TEXT)
    digest = parse_header(KEY, hot).checksum
    assert recode(KEY, hot, RAW) is hot  # same codec: the frame itself, nothing decoded or copied
    packed = recode(KEY, hot, WIRE)
    assert parse_header(KEY, packed).codec == "zstd" and parse_header(KEY, packed).checksum == digest
    assert packed == encode_frame(KEY, TEXT, fmt=WIRE)  # exactly what encoding the raw bytes gives
    assert recode(KEY, packed, WIRE) is packed
    assert recode(KEY, packed, RAW) == hot  # a raw destination gets the raw frame back, byte for byte
    noise = encode_frame(KEY, os.urandom(20000))
    assert recode(KEY, noise, WIRE) is noise  # compression does not pay: sent as stored
    with pytest.raises(IntegrityError, match="different key"):
        recode(block_key("s3://b/other", '"e"'), hot, WIRE)


def test_a_header_read_alone_is_checked_against_the_file_size():
    frame = encode_frame(KEY, b"payload" * 100)
    header = parse_header(KEY, frame[:HEADER_SIZE], frame_size=len(frame))
    assert header.codec == "raw" and header.raw_size == header.stored_size == 700
    with pytest.raises(IntegrityError, match="truncated"):
        parse_header(KEY, frame[:HEADER_SIZE], frame_size=len(frame) - 1)
