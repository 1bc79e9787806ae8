"""B29: a large object streams from cold into the hot tier a request at a time, never whole in memory.

Real moto S3 over HTTP (through the fault proxy where a body must break off), a real local
Ray, real hot directories. The node cache's memory is read from its process's
``/proc/<pid>/status`` (``VmHWM``: the peak resident set), its pid from the endpoint it
publishes in the hot directory.
"""

from __future__ import annotations

import hashlib
import os

import pytest
from helpers import land_warm_writes

from tierload.errors import TransientBackendError
from tierload.frames.blockfile import HEADER_SIZE, parse_header
from tierload.wire.endpoint import read_endpoint

MiB = 2**20


def sample_bytes(sample) -> bytes:
    """The raw bytes of a ``files`` layout sample (``(data, label)``)."""
    data = sample[0] if isinstance(sample, tuple) else sample
    return data if isinstance(data, bytes) else data.numpy().tobytes()


def hot_files(hot_dir) -> tuple[list[str], list[str]]:
    """(block files, temporary files) under a hot directory."""
    blocks, temps = [], []
    for root, _dirs, files in os.walk(hot_dir):
        for name in files:
            if name.startswith(".tierload") or name.endswith((".sock", ".json", ".key")):
                continue
            (temps if os.path.basename(root) == ".tmp" else blocks).append(os.path.join(root, name))
    return blocks, temps


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM`` of process ``pid``: its peak resident set since it started, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def test_a_body_cut_mid_stream_is_read_again_and_the_block_is_exact(bucket, tier_config, make_dataset, faulty_s3,
                                                                    tmp_path):
    """A 6 MiB object in 1 MiB requests: the first request's body breaks off halfway; that
    request alone is sent again, the hot file is whole and exact, no temporary file is left."""
    name, fs = bucket
    data = os.urandom(6 * MiB)
    fs.pipe_file(f"{name}/ds/clip.bin", data)
    config = tier_config(hot="64MiB", warm=None, cold={"max_request_bytes": "1MiB"})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", shuffle=False,
                           endpoint_url=faulty_s3.endpoint_url)
    faulty_s3.faults.gets.clear()
    faulty_s3.faults.truncate_once.add("ds/clip.bin")
    (sample,) = list(dataset)
    assert hashlib.sha256(sample_bytes(sample)).digest() == hashlib.sha256(data).digest()
    assert faulty_s3.faults.gets["ds/clip.bin"] == 6 + 1  # six requests, one of them twice
    stats = dataset.epoch_stats(0)
    assert stats["cold_bytes"] == len(data) and stats["cold_gets"] == 6 + 1
    blocks, temps = hot_files(tmp_path / "hot")
    assert temps == [] and len(blocks) == 1
    with open(blocks[0], "rb") as handle:
        frame = handle.read()
    # A raw frame of the block's bytes (the consumer verified its checksum when it read it: a
    # failed check would have cost another fetch, which the count of GETs above rules out).
    header = parse_header(dataset.manifest.blocks[0].key, frame)
    assert (header.codec, header.raw_size) == ("raw", len(data)) and frame[HEADER_SIZE:] == data


def test_a_stream_that_fails_for_good_leaves_no_file_and_the_next_read_fetches_again(bucket, tier_config,
                                                                                      make_dataset, faulty_s3,
                                                                                      tmp_path):
    """With one request per read allowed, a body cut mid-stream fails the block's fetch (the
    consumer that waited gets the error): its temporary file goes and its reservation is
    released, so the next read streams it into the hot tier again, whole and exact."""
    name, fs = bucket
    data = os.urandom(4 * MiB)
    fs.pipe_file(f"{name}/ds/clip.bin", data)
    config = tier_config(hot="64MiB", warm=None, cold={"max_request_bytes": "1MiB", "max_attempts": 1})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", shuffle=False,
                           endpoint_url=faulty_s3.endpoint_url)
    faulty_s3.faults.truncate_once.add("ds/clip.bin")
    with pytest.raises(TransientBackendError, match="broke off"):
        list(dataset)
    assert hot_files(tmp_path / "hot") == ([], [])
    dataset.set_epoch(1)
    (sample,) = list(dataset)
    assert sample_bytes(sample) == data
    blocks, temps = hot_files(tmp_path / "hot")
    # One block file: a reservation left behind by the failed stream would have kept this
    # fetch out of the hot tier (or paused the level); a temporary file would still be in .tmp.
    assert len(blocks) == 1 and temps == [] and os.path.getsize(blocks[0]) == HEADER_SIZE + len(data)


def test_streamed_blocks_are_offered_to_the_warm_tier_from_their_hot_files(bucket, tier_config, make_dataset):
    """Blocks streamed into the hot tier reach the warm tier as frames read from their files
    when the warm queue has room for them: with a hot tier that holds all three (nothing is
    evicted, so nothing is demoted), the warm tier gets all three all the same."""
    import ray

    from tierload.deploy.actors import coordinator_name

    name, fs = bucket
    objects = {f"{name}/ds/clip-{i}.bin": os.urandom(3 * MiB) for i in range(3)}
    for path, data in objects.items():
        fs.pipe_file(path, data)
    config = tier_config(hot="16MiB", warm="64MiB", cold={"max_request_bytes": "1MiB"})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", shuffle=False)
    assert sorted(sample_bytes(sample) for sample in dataset) == sorted(objects.values())
    land_warm_writes(dataset)
    coordinator = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
    assert ray.get(coordinator.stats.remote()).warm.blocks == 3
    assert dataset.cache_stats()["levels"][0]["evictions"] == 0


@pytest.mark.slow
def test_a_256_mib_object_streams_into_the_hot_tier_with_the_cache_s_peak_rss_far_below_its_size(
        bucket, tier_config, make_dataset, tmp_path):
    """B29's memory bound: the node cache's peak RSS grows by less than a quarter of the object
    (measured: +1237 MiB for a 512 MiB object read whole, +212 MiB streamed in 64 MiB requests)."""
    name, fs = bucket
    source = tmp_path / "object.bin"
    digest = hashlib.sha256()
    with open(source, "wb") as handle:
        for _ in range(256):
            chunk = os.urandom(MiB)
            digest.update(chunk)
            handle.write(chunk)
    fs.put_file(str(source), f"{name}/ds/object.bin")
    config = tier_config(hot="512MiB", warm=None, cold={"max_request_bytes": "8MiB"})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", shuffle=False)
    pid = read_endpoint(str(tmp_path / "hot")).pid
    before = peak_rss_bytes(pid)
    (sample,) = list(dataset)
    grown = peak_rss_bytes(pid) - before
    assert hashlib.sha256(sample_bytes(sample)).digest() == digest.digest()
    assert grown < 64 * MiB, f"the node cache's peak RSS grew by {grown / MiB:.0f} MiB for a 256 MiB object"
    blocks, temps = hot_files(tmp_path / "hot")
    assert len(blocks) == 1 and temps == [] and os.path.getsize(blocks[0]) > 256 * MiB
