"""Keyed block checksums (issue 13, item 5): a block file tierload did not write, even with a
valid header, is rejected as corrupt and fetched again. Real tiers, moto's S3, a local Ray."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from helpers import index_of, land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.errors import IntegrityError
from tierload.frames.blockfile import decode_frame, encode_frame
from tierload.frames.checksum_key import KEY_FILE, adopt_key, local_key

SECRET = bytes(range(32))


def test_a_frame_checks_only_under_the_key_it_was_made_with():
    key = "block-" + "0" * 32
    keyed = encode_frame(key, b"sample bytes", secret=SECRET)
    assert decode_frame(key, keyed, secret=SECRET)[0] == b"sample bytes"
    with pytest.raises(IntegrityError):
        decode_frame(key, keyed, secret=bytes(32))
    forged = encode_frame(key, b"forged bytes")  # valid header, unkeyed checksum: all a forger can make
    with pytest.raises(IntegrityError):
        decode_frame(key, forged, secret=SECRET)


def test_the_key_lives_in_the_warm_dir_with_a_copy_in_each_hot_dir(tmp_path):
    warm, hot_a, hot_b = (tmp_path / name for name in ("warm", "hot-a", "hot-b"))
    for path in (warm, hot_a, hot_b):
        path.mkdir(mode=0o700)
    first = adopt_key(str(warm), str(hot_a))
    assert adopt_key(str(warm), str(hot_b)) == first  # two nodes, one deployment key
    assert local_key(hot_a, create=False) == local_key(hot_b, create=False) == first
    for path in (warm, hot_a, hot_b):
        assert stat.S_IMODE(os.stat(path / KEY_FILE).st_mode) == 0o600
    assert adopt_key(None, str(tmp_path / "hot-a")) == first  # no warm tier: the hot dir's key


def _collect(batch):
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def _samples(dataset, epoch):
    dataset.set_epoch(epoch)
    loader = DataLoader(dataset, batch_size=2, num_workers=0, collate_fn=_collect)
    return {index_of(sample): bytes(sample) for samples, _ in loader for sample in samples}


def test_a_forged_block_with_a_valid_header_is_refetched_not_served(bucket, tier_config, make_dataset, tmp_path):
    """Case F07. The issue's attack: a block file replaced by one carrying a valid header and a checksum
    anyone can compute (the unkeyed xxh3 of the forged bytes) is never served."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 6, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm="1MiB"), layout="files", shuffle=False)
    assert _samples(dataset, 0) == dict(enumerate(payloads))
    land_warm_writes(dataset)
    assert (tmp_path / "warm" / KEY_FILE).is_file() and (tmp_path / "hot" / KEY_FILE).is_file()
    forged_any = False
    for tier in ("hot", "warm"):
        for path in (tmp_path / tier).rglob("*"):
            if path.is_file() and ".tmp" not in path.parts and not path.name.startswith("."):
                raw = decode_frame(path.name, path.read_bytes(), secret=local_key(tmp_path / "warm", create=False))[0]
                path.write_bytes(encode_frame(path.name, raw.replace(raw[:8], b"FORGED!!")))
                forged_any = True
    assert forged_any
    assert _samples(dataset, 1) == dict(enumerate(payloads))  # every sample is the source's
    stats = dataset.epoch_stats(1)
    assert stats["integrity_failures"] >= 6 and stats["cold_gets"] == 6


def test_the_coordinator_gives_every_node_one_key(tmp_path):
    from tierload.config.loading import load_config
    from tierload.coordinator.actor import Coordinator

    alone = Coordinator(load_config({"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": None}}), lambda: None)
    first, second = bytes([1]) * 32, bytes([2]) * 32
    assert alone.checksum_key(first) == first and alone.checksum_key(second) == first  # the first offer wins
    warm = tmp_path / "warm"
    shared = Coordinator(load_config({"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": str(warm)}}),
                         lambda: None).start()
    assert shared.checksum_key(first) == local_key(warm, create=False)  # the warm tier's key


@pytest.mark.parametrize("level", [None, 3])
def test_a_block_file_is_decoded_from_disk_as_from_memory_and_a_forged_one_is_refused(tmp_path, level):
    """The consumer's hot-hit path (decode_frame_file) reads the payload straight into the bytes
    it returns; it must refuse what decode_frame refuses."""
    from tierload.frames.blockfile import FrameFormat, decode_frame_file

    key = "block-" + "1" * 32
    raw = b"sample bytes " * 5000
    path = tmp_path / key
    path.write_bytes(encode_frame(key, raw, fmt=FrameFormat(level), secret=SECRET))
    assert decode_frame_file(key, path, secret=SECRET) == raw
    path.write_bytes(encode_frame(key, raw.replace(b"sample", b"forged")))  # valid header, unkeyed checksum
    with pytest.raises(IntegrityError, match="checksum"):
        decode_frame_file(key, path, secret=SECRET)
    path.write_bytes(encode_frame(key, raw, fmt=FrameFormat(level), secret=SECRET)[:-1])
    with pytest.raises(IntegrityError, match="truncated"):
        decode_frame_file(key, path, secret=SECRET)
    with pytest.raises(FileNotFoundError):
        decode_frame_file(key, tmp_path / "absent", secret=SECRET)


def _hash_in_child(data: bytes, out) -> None:
    from tierload.frames.checksum import checksum

    out.put(checksum(data, SECRET))


def test_a_forked_process_hashes_large_blocks_after_its_parent_started_the_thread_pool(monkeypatch):
    """blake3's threaded hash runs in Rayon's global pool, whose threads a forked child does
    not have: hashed there with threads, the child would wait forever (it did, before the guard)."""
    import multiprocessing

    import blake3

    from tierload.frames import checksum as checksum_module

    monkeypatch.setattr(checksum_module, "THREADED_FROM_CORES", 1)  # this machine may have 2 cores
    monkeypatch.setattr(checksum_module, "_pool_pid", None)
    data = os.urandom(checksum_module.THREADED_FROM_BYTES)
    assert checksum_module.threads_for(len(data)) == blake3.blake3.AUTO
    expected = checksum_module.checksum(data, SECRET)  # starts the pool in this process
    assert expected == int.from_bytes(blake3.blake3(data, key=SECRET).digest(8), "little")
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_hash_in_child, args=(data, out))
    child.start()
    child.join(timeout=60)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0, "the forked child hung hashing a large block (threads of its parent's pool)"
    assert out.get(timeout=5) == expected
