"""Block keys, the on-tier block format and the wire codec."""

from __future__ import annotations

import os
import unicodedata

import pytest

from tierload import codec
from tierload.blockfile import HEADER_SIZE, decode_block, encode_block
from tierload.errors import IntegrityError
from tierload.keys import KEY_PATTERN, block_key, check_key

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


@pytest.mark.parametrize("payload", [b"", b"x", os.urandom(5000), b"abc" * 10000])
@pytest.mark.parametrize("level", [None, 3])
def test_block_file_round_trips(payload, level):
    key = block_key("s3://b/k", '"e"')
    stored = encode_block(key, payload, compress_level=level)
    raw, digest = decode_block(key, stored)
    assert raw == payload
    if level is not None and len(payload) > 1000 and payload[:3] == b"abc":
        assert len(stored) < len(payload)  # compressible blocks are stored compressed


def test_block_file_detects_corruption_truncation_and_wrong_key():
    key = block_key("s3://b/k", '"e"')
    stored = bytearray(encode_block(key, b"hello world" * 100))
    flipped = bytearray(stored)
    flipped[HEADER_SIZE + 5] ^= 0xFF
    with pytest.raises(IntegrityError, match="checksum"):
        decode_block(key, bytes(flipped))
    with pytest.raises(IntegrityError, match="truncated"):
        decode_block(key, bytes(stored[:-1]))
    with pytest.raises(IntegrityError, match="different key"):
        decode_block(block_key("s3://b/other", '"e"'), bytes(stored))
    with pytest.raises(IntegrityError):
        decode_block(key, b"not a block")


def test_wire_codec_compresses_what_compresses_and_sends_the_rest_raw():
    text = b"the same few words again and again " * 200
    packed = codec.encode(text, level=3, min_ratio=1.1)
    assert packed.codec == "zstd" and packed.ratio > 5 and codec.decode(packed) == text
    noise = os.urandom(20000)  # like JPEG: does not compress
    sent = codec.encode(noise, level=3, min_ratio=1.1)
    assert sent.codec == "raw" and sent.ratio == 1.0 and codec.decode(sent) == noise
    empty = codec.encode(b"", level=3, min_ratio=1.1)
    assert codec.decode(empty) == b""


@pytest.mark.parametrize("kind", ["text", "noise", "noise with a compressible tail"])
def test_large_blocks_are_judged_by_a_sample_and_always_round_trip(kind):
    size = 4 * codec.SAMPLE_MIN_BLOCK_BYTES
    text = (b"the same few words again and again " * (size // 35 + 1))[:size]
    noise = os.urandom(size)
    data = {"text": text, "noise": noise,
            # the last eighth compresses, but no sample chunk falls in it
            "noise with a compressible tail": noise[:size - size // 8] + text[:size // 8]}[kind]
    sent = codec.encode(data, level=3, min_ratio=1.1)
    assert codec.decode(sent) == data
    assert sent.codec == ("zstd" if kind == "text" else "raw")
    if kind == "text":
        assert sent.ratio > 5


def test_wire_decode_rejects_size_mismatch():
    with pytest.raises(ValueError):
        codec.decode(codec.WirePayload("raw", b"abc", 4))
    with pytest.raises(ValueError, match="unknown wire codec"):
        codec.decode(codec.WirePayload("lz4", b"abc", 3))
