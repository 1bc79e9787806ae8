"""A tier copy that fails to decode is corruption, whatever the reason (issue 12 item 1).

The faults are injected for real: a byte of a block file is changed on disk between epochs,
then the dataset reads on through a real local Ray and the local S3 server (moto over HTTP).
"""

from __future__ import annotations

from pathlib import Path

from helpers import index_of, land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.errors import IntegrityError
from tierload.frames.blockfile import HEADER_SIZE, FrameFormat, decode_frame, encode_frame, parse_header, verify_frame
from tierload.frames.checksum_key import local_key
from tierload.wire.endpoint import ENDPOINT_FILE

_CODEC_BYTE = 4  # after the 4-byte magic


def deployment_secret(tmp_path: Path) -> bytes:
    """The deployment's checksum key, from the copy the node cache keeps in its hot directory."""
    return local_key(tmp_path / "hot", create=False)


def block_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and ".tmp" not in p.parts and p.name != ENDPOINT_FILE
                  and not p.name.startswith(".tierload"))


def epoch_samples(dataset, epoch: int) -> list[tuple[int, bytes]]:
    dataset.set_epoch(epoch)
    loader = DataLoader(dataset, batch_size=4, collate_fn=lambda batch: [item[0] for item in batch])
    return [(index_of(sample), bytes(sample)) for batch in loader for sample in batch]


def assert_exactly_once(got: list[tuple[int, bytes]], payloads: list[bytes]) -> None:
    assert sorted(index for index, _ in got) == list(range(len(payloads)))  # every sample once
    assert all(data == payloads[index] for index, data in got)  # exact bytes, never a corrupt copy


def test_hot_block_with_a_flipped_codec_byte_is_dropped_and_refetched(bucket, tier_config, make_dataset,
                                                                       tmp_path):
    """Case F01: a hot block whose codec byte is flipped is corruption: dropped, counted, refetched from cold"""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 10, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm=None), layout="files", shuffle=False)
    assert_exactly_once(epoch_samples(dataset, 0), payloads)
    files = block_files(tmp_path / "hot")
    assert len(files) == 10
    victim = files[3]
    data = bytearray(victim.read_bytes())
    assert data[_CODEC_BYTE] == 0  # the hot tier stores raw frames
    data[_CODEC_BYTE] = 1  # now claims zstd: the payload cannot decode
    victim.write_bytes(bytes(data))
    assert_exactly_once(epoch_samples(dataset, 1), payloads)
    stats = dataset.epoch_stats(1)
    assert stats["integrity_failures"] == 1 and stats["cold_gets"] == 1
    decode_frame(victim.name, victim.read_bytes(), secret=deployment_secret(tmp_path))  # now a good one
    assert_exactly_once(epoch_samples(dataset, 2), payloads)
    assert dataset.epoch_stats(2).get("integrity_failures", 0) == 0


def test_hot_block_with_a_bad_codec_byte_is_refetched_from_the_warm_tier(bucket, tier_config, make_dataset,
                                                                        tmp_path):
    """Case F01: a hot block that fails to decode is refetched from the warm tier"""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 6, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm="1MiB"), layout="files",
                           shuffle=False)
    assert_exactly_once(epoch_samples(dataset, 0), payloads)
    land_warm_writes(dataset)
    assert len(block_files(tmp_path / "warm")) == 6
    victim = block_files(tmp_path / "hot")[2]
    data = bytearray(victim.read_bytes())
    data[_CODEC_BYTE] = 0xEE  # no such codec
    victim.write_bytes(bytes(data))
    assert_exactly_once(epoch_samples(dataset, 1), payloads)
    stats = dataset.epoch_stats(1)
    assert stats["integrity_failures"] == 1 and stats.get("cold_gets", 0) == 0  # the warm copy served it
    decode_frame(victim.name, victim.read_bytes(), secret=deployment_secret(tmp_path))


def test_every_single_bit_flip_of_a_zstd_frame_is_an_integrity_error_or_harmless():
    """Case F01. The issue counted 1,223 of 5,794 single-bit flips of one payload raising ``ZstdError``."""
    key = "k" * 16
    raw = b"".join(f"{i:08d}".encode() + bytes(40) for i in range(60))
    frame = encode_frame(key, raw, fmt=FrameFormat(zstd_level=3))
    assert parse_header(key, frame).codec == "zstd"
    for bit in range(HEADER_SIZE * 8, len(frame) * 8):
        flipped = bytearray(frame)
        flipped[bit // 8] ^= 1 << (bit % 8)
        try:
            got, _ = decode_frame(key, bytes(flipped))
        except IntegrityError:
            pass
        else:
            assert got == raw  # a flip that still decodes must decode to the checked bytes
        try:
            verify_frame(key, bytes(flipped))
        except IntegrityError:
            pass


def test_warm_block_with_a_flipped_bit_in_its_zstd_payload_is_dropped_and_refetched(bucket, tier_config,
                                                                                     make_dataset, tmp_path):
    """Case F01: zstd bit rot in a warm block: the copy is dropped, counted and refetched; the epoch goes on"""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 8, size=4000)  # zeros after the index: compresses well
    config = tier_config(hot=0, warm="1MiB")
    config = config.model_copy(update={"warm": config.warm.model_copy(update={"compress": True})})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", shuffle=False)
    assert_exactly_once(epoch_samples(dataset, 0), payloads)
    land_warm_writes(dataset)
    files = block_files(tmp_path / "warm")
    assert len(files) == 8
    victim = files[5]
    data = bytearray(victim.read_bytes())
    assert parse_header(victim.name, data).codec == "zstd"
    data[HEADER_SIZE + (len(data) - HEADER_SIZE) // 2] ^= 0x10  # one bit inside the zstd payload
    victim.write_bytes(bytes(data))
    try:
        decode_frame(victim.name, bytes(data), secret=deployment_secret(tmp_path))
    except IntegrityError:
        pass
    else:
        raise AssertionError("the injected fault is not a corruption")
    assert_exactly_once(epoch_samples(dataset, 1), payloads)
    stats = dataset.epoch_stats(1)
    assert stats["integrity_failures"] == 1 and stats["cold_gets"] == 1
    land_warm_writes(dataset)
    if victim.exists():  # rewritten from the cold copy: a good frame, never the bad one
        decode_frame(victim.name, victim.read_bytes(), secret=deployment_secret(tmp_path))
        assert victim.read_bytes() != bytes(data)
    assert_exactly_once(epoch_samples(dataset, 2), payloads)
    assert dataset.epoch_stats(2).get("integrity_failures", 0) == 0
