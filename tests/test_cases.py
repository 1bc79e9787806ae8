"""Real-world failure cases from ../shared/cases, turned into tests (IDs in each docstring).

Everything is real: moto's S3 server over HTTP (behind a fault-injecting proxy where a case
needs a fault), a local Ray, real directories.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import threading
import time

import pytest
import rotating_credentials
import torch
from faulty_s3 import FaultyS3
from helpers import index_of, land_warm_writes, put_indexed_objects, tier_bytes
from torch.utils.data import DataLoader

from tierload.cache.messages import Endpoint, StreamPlan
from tierload.errors import CredentialsExpiredError


def collect_raw(batch):
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def indices(dataset, num_workers=0, batch_size=4, **kwargs):
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collect_raw, **kwargs)
    return [index_of(sample) for samples, _ in loader for sample in samples]


def proxied(s3, proxy, **extra):
    return {**s3.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"},
            **extra}


def test_b06_expired_credentials_are_refreshed_once_and_the_read_retried(s3, bucket, tier_config, make_dataset):
    """B06: ExpiredToken on GetObject -> the provider is asked once more, the read is retried."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 50, size=100)
    rotating_credentials.LOG.unlink(missing_ok=True)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.expired_access_keys.add(rotating_credentials.EXPIRED)
        config = tier_config(cold={"credential_provider": "rotating_credentials:rotating"})
        dataset = make_dataset(f"s3://{name}/ds", config, layout="files", batch_size=5,
                               storage_options=proxied(s3, proxy))
        assert sorted(indices(dataset, num_workers=2, batch_size=5)) == list(range(50))
        calls = [json.loads(line) for line in rotating_credentials.LOG.read_text().splitlines()]
        reader_calls = [c for c in calls if c["pid"] != os.getpid()]
        assert [c["key"] for c in reader_calls] == [rotating_credentials.EXPIRED, rotating_credentials.FRESH]
        # Hot hits need no credentials: a second epoch from the hot tier asks for none.
        dataset.set_epoch(1)
        assert sorted(indices(dataset)) == list(range(50))
        assert len(rotating_credentials.LOG.read_text().splitlines()) == len(calls)


def test_b06_a_second_expiry_reaches_the_user(s3, bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 3, size=100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.expired_access_keys.add(rotating_credentials.EXPIRED)
        config = tier_config(cold={"credential_provider": "rotating_credentials:always_expired"})
        dataset = make_dataset(f"s3://{name}/ds", config, layout="files", storage_options=proxied(s3, proxy))
        with pytest.raises(CredentialsExpiredError):
            indices(dataset)


@pytest.fixture
def amazonaws_guard(ray_session):
    """Case B07: this process refuses to resolve amazonaws.com names as well (Ray workers and
    spawned processes already do, tests/dns_guard.py); yields ``events(all_time=False)``, the
    guard's log since the test began (or all of it)."""
    import dns_guard

    log = os.environ[dns_guard.LOG_VARIABLE]
    since = os.path.getsize(log) if os.path.exists(log) else 0
    restore = dns_guard.install(log)
    yield lambda all_time=False: dns_guard.events(log, 0 if all_time else since)
    restore()


def test_b07_the_amazonaws_guard_refuses_in_every_kind_of_process(amazonaws_guard):
    """Case B07: the guard is no no-op: an amazonaws.com name is refused (and logged) here, in a
    fresh interpreter started with the session's environment, and in a Ray worker; other names resolve."""
    import socket
    import sys

    import ray

    host = "s3.eu-west-3.amazonaws.com"
    with pytest.raises(socket.gaierror, match="dns_guard"):
        socket.getaddrinfo(host, 443)
    assert socket.getaddrinfo("127.0.0.1", 80) and socket.getaddrinfo("localhost", 80)
    child = subprocess.run([sys.executable, "-c", f"import socket; socket.getaddrinfo({host!r}, 443)"],
                           capture_output=True, text=True, timeout=60)
    assert child.returncode != 0 and "dns_guard" in child.stderr

    def resolve_in_ray(name: str) -> str:
        import socket

        try:
            socket.getaddrinfo(name, 443)
        except socket.gaierror as exc:
            return str(exc)
        return "resolved"

    assert "dns_guard" in ray.get(ray.remote(num_cpus=0)(resolve_in_ray).remote(host), timeout=120)
    refused = [e for e in amazonaws_guard() if e["event"] == "refused"]
    assert len(refused) == 3 and len({e["pid"] for e in refused}) == 3 and {e["host"] for e in refused} == {host}


@pytest.mark.parametrize("how", ["kwarg", "storage_options", "env"])
def test_b07_the_endpoint_reaches_every_process(s3, bucket, tier_config, make_dataset, monkeypatch, how,
                                               amazonaws_guard):
    """B07: however the endpoint is given, every reader (spawned workers, the node cache actor)
    goes to it; every one of them runs under the amazonaws.com resolution guard, which logs no
    attempt (and this machine cannot reach amazonaws.com, so a stray request would also fail)."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 8, size=100)
    credentials = {"key": s3.storage_options["key"], "secret": s3.storage_options["secret"]}
    kwargs = {"layout": "files", "batch_size": 2}
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(variable, raising=False)
    if how == "kwarg":
        dataset = make_dataset(f"s3://{name}/ds", tier_config(cold={"region": "eu-west-3"}),
                               endpoint_url=s3.endpoint_url, storage_options=credentials, **kwargs)
    elif how == "storage_options":
        options = {**credentials, "client_kwargs": {"endpoint_url": s3.endpoint_url, "region_name": "eu-west-3"}}
        dataset = make_dataset(f"s3://{name}/ds", tier_config(), storage_options=options, **kwargs)
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
        monkeypatch.setenv("AWS_REGION", "eu-west-3")
        dataset = make_dataset(f"s3://{name}/ds", tier_config(), storage_options=credentials, **kwargs)
    shipped = dataset._cold.storage_options["client_kwargs"]
    assert shipped["endpoint_url"] == s3.endpoint_url and shipped["region_name"] == "eu-west-3"
    # Spawned workers start from a clean interpreter: nothing reaches them but the pickled dataset.
    context = multiprocessing.get_context("spawn" if how == "env" else "fork")
    assert sorted(indices(dataset, num_workers=2, batch_size=2, multiprocessing_context=context)) == list(range(8))
    assert [e for e in amazonaws_guard() if e["event"] == "refused"] == []
    guarded = {e["pid"] for e in amazonaws_guard(all_time=True) if e["event"] == "installed"}
    assert dataset.cache_stats()["pid"] in guarded  # the node cache actor read under the guard
    if how == "env":  # spawned workers (forked ones inherit this process's guard)
        spawned = {e["pid"] for e in amazonaws_guard() if e["event"] == "installed" and e["ppid"] == os.getpid()}
        assert len(spawned) >= 2


def _single_reader(endpoint: Endpoint, stream_id: str, plan: StreamPlan, key: str, delay_s: float) -> str:
    from tierload.cache.consumer import BlockReader, NodeLink

    time.sleep(delay_s)
    link = NodeLink(endpoint)
    link.call("open_stream", stream_id, 0, 1, plan)
    data = BlockReader(link).read(stream_id, 0, 0, key)
    link.call("close_consumer", stream_id, 0)
    return hashlib.sha256(data).hexdigest()


def test_b10_eight_processes_one_cold_fetch(s3, bucket, tier_config, make_dataset):
    """B10: 8 processes ask for one 8 MiB object at staggered times while S3 is slow: one GET,
    every reader gets the exact bytes, and the hot file is only ever complete."""
    name, fs = bucket
    payload = os.urandom(8 * 2**20)
    fs.pipe_file(f"{name}/big/one.bin", payload)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.slow_chunk_s = 0.01  # ~1.3 s for the whole object
        dataset = make_dataset(f"s3://{name}/big", tier_config(), layout="files",
                               storage_options=proxied(s3, proxy))
        block = dataset.manifest.blocks[0]
        plan = StreamPlan(dataset_id=dataset.manifest.dataset_id, epoch=0, seq=[0], consume_len=1)
        with multiprocessing.get_context("fork").Pool(8) as pool:
            results = [pool.apply_async(_single_reader, (dataset._endpoint, f"b10-{i}", plan, block.key, i * 0.15))
                       for i in range(8)]
            digests = [r.get(timeout=120) for r in results]
        assert digests == [hashlib.sha256(payload).hexdigest()] * 8
        assert proxy.faults.gets["big/one.bin"] == 1  # single flight


def test_b11_a_stream_cut_halfway_leaves_nothing_behind_and_is_retried(s3, bucket, tier_config, make_dataset,
                                                                        tmp_path):
    """Case B11 (a): the S3 body breaks off at 50%: no partial file, the read is retried, bytes are right."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 4, size=300_000)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.truncate_once.add("ds/0/obj-000002.bin")
        dataset = make_dataset(f"s3://{name}/ds", tier_config(), layout="files",
                               storage_options=proxied(s3, proxy))
        loader = DataLoader(dataset, batch_size=1, collate_fn=collect_raw)
        got = {index_of(s): bytes(s) for samples, _ in loader for s in samples}
        assert got == dict(enumerate(payloads))
        assert proxy.faults.gets["ds/0/obj-000002.bin"] == 2
    assert not list((tmp_path / "hot" / ".tmp").iterdir())
    stats = dataset.cache_stats()["levels"][0]
    assert stats["used_bytes"] == tier_bytes(tmp_path / "hot")


@pytest.fixture
def tiny_disk(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
                          capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs here to fill a disk: {proc.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)  # lazily: the actor may still hold it open


def test_b11_a_full_disk_never_leaves_a_partial_block(s3, bucket, tier_config, make_dataset, tiny_disk):
    """Case B11 (b): the hot directory's disk fills (ENOSPC) mid-write: the block is still served, no
    temporary file or index entry is left, accounting matches the disk."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 6, size=30_000)
    config = tier_config(hot="1MiB", warm=None)
    config = config.model_copy(update={"hot": config.hot.model_copy(update={"dir": str(tiny_disk)})})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    got = {index_of(s): bytes(s) for samples, _ in DataLoader(dataset, batch_size=2, collate_fn=collect_raw)
           for s in samples}
    assert got == dict(enumerate(payloads))
    assert not list((tiny_disk / ".tmp").iterdir())
    level = dataset.cache_stats()["levels"][0]
    on_disk = tier_bytes(tiny_disk)
    assert level["used_bytes"] == on_disk and level["blocks"] < 6  # some blocks did not fit


def test_b11_b12_a_killed_cache_restarts_on_the_same_dirs_and_sweeps_leftovers(s3, bucket, tier_config,
                                                                               make_dataset, tmp_path):
    """Case B11 (c), Case B12: SIGKILL the node cache mid-epoch; a leftover temporary block from the dead
    process is never served and is swept; the restarted cache reuses complete blocks."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=1000)
    config = tier_config()
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert sorted(indices(dataset)) == list(range(30))
    pid = dataset.cache_stats()["pid"]
    key = dataset.manifest.blocks[0].key
    leftover = tmp_path / "hot" / ".tmp" / f"{key}.{pid}.dead"
    leftover.write_bytes(b"half of a block")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # Ray restarts the detached actor; a new dataset finds it by name
        try:
            again = make_dataset(f"s3://{name}/ds", config, layout="files")
            stats = again.cache_stats()
            break
        except Exception:  # noqa: BLE001 - restarting
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    assert stats["pid"] != pid and not leftover.exists()
    assert stats["levels"][0]["blocks"] == 30  # complete blocks adopted
    again.set_epoch(1)
    assert sorted(indices(again)) == list(range(30))
    assert again.epoch_stats(1)["cold_gets"] == 0


def test_b12_two_instances_at_once_on_different_and_on_the_same_dirs(s3, bucket, tier_config, make_dataset,
                                                                    tmp_path):
    """Case B12: two instances at once, on different dirs and on one dir, each read every sample once"""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 24, size=200)
    shared = tier_config()
    other = shared.model_copy(update={"hot": shared.hot.model_copy(update={"dir": str(tmp_path / "hot2")}),
                                      "warm": shared.warm.model_copy(update={"url": str(tmp_path / "warm2")})})
    first = make_dataset(f"s3://{name}/ds", shared, layout="files", batch_size=4)
    same_dir = make_dataset(f"s3://{name}/ds", shared, layout="files", batch_size=4, seed=5)
    other_dir = make_dataset(f"s3://{name}/ds", other, layout="files", batch_size=4)
    assert first._endpoint.address == same_dir._endpoint.address  # one owner per directory
    assert first._endpoint.address != other_dir._endpoint.address
    results = {}

    def run(label, dataset):
        results[label] = sorted(indices(dataset, num_workers=2))

    threads = [threading.Thread(target=run, args=item) for item in
               (("first", first), ("same", same_dir), ("other", other_dir))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == {label: list(range(24)) for label in ("first", "same", "other")}


def test_b13_the_source_is_never_touched_and_a_tiny_hot_tier_is_bypassed(ray_session, tier_config, make_dataset,
                                                                         tmp_path):
    """B13: a data set that lives only in a local directory (the cold tier, read-only) is
    unchanged after an epoch through a hot tier smaller than one object, which is bypassed."""
    source = tmp_path / "only-copy"
    for i in range(10):
        (source / str(i % 2)).mkdir(parents=True, exist_ok=True)
        (source / str(i % 2) / f"obj-{i:06d}.bin").write_bytes(f"{i:08d}".encode() + os.urandom(5000))
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.rglob("*") if p.is_file()}
    dataset = make_dataset(f"file://{source}", tier_config(hot="4KiB", warm=None), layout="files",
                           storage_options={})
    assert sorted(indices(dataset)) == list(range(10))
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in source.rglob("*") if p.is_file()}
    assert after == before
    stats = dataset.epoch_stats(0)
    assert stats["wire_raw_bytes"] == 10 * 5008  # every block bypassed the hot tier
    assert dataset.cache_stats()["levels"][0]["blocks"] == 0


def test_b23_no_threads_fds_or_actors_leak_across_epochs(s3, bucket, tier_config, make_dataset):
    """B23: 15 epochs, breaking out early every other epoch: threads, open files and actors
    return to their baseline, in this process and in the node cache."""
    import ray

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 100, size=100)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(prefetch={"depth_blocks": 8}), layout="files",
                           batch_size=5)
    assert len(indices(dataset)) == 100

    def snapshot():
        actors = sum(1 for a in ray.util.list_named_actors(all_namespaces=True))
        return threading.active_count(), len(os.listdir("/proc/self/fd")), actors

    baseline = snapshot()
    cache_threads = dataset.cache_stats()["threads"]
    for epoch in range(1, 16):
        dataset.set_epoch(epoch)
        started = time.monotonic()
        loader = DataLoader(dataset, batch_size=5, collate_fn=collect_raw)
        for batch_index, _ in enumerate(loader):
            if epoch % 2 and batch_index == 3:
                break
        del loader
        assert time.monotonic() - started < 60
        assert snapshot() == baseline, f"epoch {epoch}"
    stats = dataset.cache_stats()
    assert stats["threads"] <= cache_threads + 2 and len(stats["streams"]) == 0


@pytest.mark.parametrize("num_workers", [0, 2])
def test_b25_the_cache_actor_dies_mid_epoch_and_the_epoch_finishes_exactly_once(s3, bucket, tier_config,
                                                                               make_dataset, num_workers):
    """B25: SIGKILL the node cache mid-epoch: readers serve blocks themselves from warm/cold until
    the restarted cache answers, reopen their streams there, and yield every sample once."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 60, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(prefetch={"depth_blocks": 2}), layout="files",
                           batch_size=2)
    pid = dataset.cache_stats()["pid"]
    seen: list[int] = []
    loader = DataLoader(dataset, batch_size=2, num_workers=num_workers, collate_fn=collect_raw)
    started = time.monotonic()
    for batch_index, (samples, _) in enumerate(loader):
        seen.extend(index_of(s) for s in samples)
        if batch_index == 5:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    assert sorted(seen) == list(range(60))
    assert time.monotonic() - started < 120
    if num_workers == 0:
        assert dataset.consumer_stats["fallback_reads"] + dataset.consumer_stats["reconnects"] > 0
    assert dataset.cache_stats()["pid"] != pid  # the restarted cache, found again by the dataset
    dataset.set_epoch(1)
    assert sorted(indices(dataset)) == list(range(60))


def test_the_node_cache_reconnects_to_a_restarted_coordinator(s3, bucket, tier_config, make_dataset):
    """Issue 4: the coordinator is a named, detached actor; after it restarts, nodes find it by
    name, see its new incarnation and resend their residency; the warm index is rebuilt from
    the warm store."""
    import ray

    from tierload.cache.runtime import coordinator_name

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=1000)
    config = tier_config(hot="12KiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert sorted(indices(dataset)) == list(range(30))
    coordinator = ray.get_actor(coordinator_name(config), namespace=config.ray.namespace)
    land_warm_writes(dataset)  # the last warm writes and residency changes reach it
    before = ray.get(coordinator.stats.remote())
    assert before["warm"]["blocks"] == 30 and before["held_blocks"] > 0
    ray.kill(coordinator, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            after = ray.get(ray.get_actor(coordinator_name(config), namespace="tierload").stats.remote(), timeout=10)
            if after["incarnation"] != before["incarnation"] and after["held_blocks"] == before["held_blocks"]:
                break
        except Exception:  # noqa: BLE001 - restarting
            pass
        assert time.monotonic() < deadline, "the node never resent its residency to the restarted coordinator"
        time.sleep(0.5)
    assert after["warm"]["blocks"] == 30  # rebuilt from the warm store
    dataset.set_epoch(1)
    assert sorted(indices(dataset)) == list(range(30))
    assert dataset.epoch_stats(1)["cold_bytes"] == 0


def test_b05_forking_workers_while_another_thread_talks_to_the_cache(s3, bucket, tier_config, make_dataset):
    """B05: DataLoader workers forked while another thread of the parent is inside a call to the
    node cache must not inherit that call's lock (they would wait on it forever)."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=200)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(), layout="files", batch_size=4)
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            dataset.cache_stats()

    thread = threading.Thread(target=monitor, daemon=True)
    thread.start()
    try:
        for epoch in range(4):
            dataset.set_epoch(epoch)
            assert sorted(indices(dataset, num_workers=2, timeout=60)) == list(range(40))
    finally:
        stop.set()
        thread.join(10)


def _parquet(columns: dict, row_group_size: int) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer, row_group_size=row_group_size)
    return buffer.getvalue()


def test_b09_a_parquet_file_rewritten_with_another_schema_is_served_new_from_every_tier(
        s3, bucket, tier_config, make_dataset, tmp_path):
    """Case B09: Parquet A (read, so it is in hot and warm) is overwritten by Parquet B with another
    schema and length; a refreshed start reads B's rows only and neither tier keeps A's blocks. A
    reader of A still iterating when its blocks are dropped ends at once, with every A row it was
    given right or a clear SourceChangedError, never a hang."""
    from tierload.errors import SourceChangedError

    name, fs = bucket
    fs.pipe_file(f"{name}/pq/part-0.parquet", _parquet({"x": list(range(10))}, 5))
    fs.invalidate_cache()
    config = tier_config(hot="1MiB", warm="1MiB")
    old = make_dataset(f"s3://{name}/pq", config, shuffle=False)
    assert sorted(row["x"] for row, _ in old) == list(range(10))
    land_warm_writes(old)
    old_keys = {block.key for block in old.manifest.blocks}
    on_disk = {p.name for tier in ("hot", "warm") for p in (tmp_path / tier).rglob("*") if p.is_file()}
    assert old_keys <= on_disk
    in_use = iter(DataLoader(old, batch_size=None, num_workers=0))
    first = next(in_use)[0]
    assert first["x"] == 0

    fs.pipe_file(f"{name}/pq/part-0.parquet", _parquet({"y": [f"b{i}" for i in range(7)], "z": [1.5] * 7}, 7))
    fs.invalidate_cache()
    fresh = make_dataset(f"s3://{name}/pq", config, shuffle=False, refresh_manifest=True)
    assert sorted(row["y"] for row, _ in fresh) == [f"b{i}" for i in range(7)]
    assert all(set(row) == {"y", "z"} for row, _ in fresh)
    land_warm_writes(fresh)
    on_disk = {p.name for tier in ("hot", "warm") for p in (tmp_path / tier).rglob("*") if p.is_file()}
    assert not old_keys & on_disk  # no tier keeps A

    started = time.monotonic()
    try:
        rest = [row["x"] for row, _ in in_use]
        assert rest == list(range(1, 10))  # what was already in the reader's window, exact
    except SourceChangedError:
        pass  # the rest of A is gone at the source: said clearly
    assert time.monotonic() - started < 30


def test_b16_nfc_and_nfd_names_and_glob_characters_are_distinct_literal_keys(s3, bucket, tier_config, make_dataset,
                                                                           tmp_path):
    """Case B16: NFC and NFD spellings of one name are two objects; a key with glob characters given
    as the dataset URL is read literally (not the objects its pattern would match); every tier file
    stays inside its tier directory."""
    import unicodedata

    name, fs = bucket
    nfc = unicodedata.normalize("NFC", "imgs/naïve café.bin")
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfc != nfd
    objects = {nfc: b"00000000nfc", nfd: b"00000001nfd", "imgs/cat [1].bin": b"00000002bracket",
               "imgs/cat 1.bin": b"00000003plain", "imgs/x?y*z.bin": b"00000004glob", "imgs/xAyBBz.bin": b"00000005",
               "imgs/../escape.bin": b"00000006dots"}
    for key, body in objects.items():
        fs.pipe_file(f"{name}/data/{key}", body)
    fs.invalidate_cache()
    config = tier_config(hot="1MiB", warm="1MiB")
    dataset = make_dataset(f"s3://{name}/data", config, layout="files")
    got = {bytes(sample) for samples, _ in DataLoader(dataset, batch_size=4, collate_fn=collect_raw)
           for sample in samples}
    assert got == set(objects.values())  # NFC and NFD both read, each with its own bytes
    for literal, body in (("imgs/cat [1].bin", b"00000002bracket"), ("imgs/x?y*z.bin", b"00000004glob")):
        one = make_dataset(f"s3://{name}/data/{literal}", config, layout="files")
        assert [bytes(s) for samples, _ in DataLoader(one, batch_size=4, collate_fn=collect_raw)
                for s in samples] == [body]
    land_warm_writes(dataset)
    for tier in ("hot", "warm"):
        root = (tmp_path / tier).resolve()
        files = [p.resolve() for p in (tmp_path / tier).rglob("*") if p.is_file()]
        assert files and all(root in p.parents for p in files)


def test_b17_an_object_a_cached_listing_lacks_opens_directly_and_a_refresh_counts_it(
        s3, bucket, tier_config, make_dataset):
    """Case B17: the prefix's listing is cached; an object added since opens directly by its key (the
    cached listing is not asked whether it exists), and a refreshed listing counts it."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/train", 5, size=100)
    config = tier_config()
    stale = make_dataset(f"s3://{name}/train", config, layout="files")
    assert stale.manifest.num_samples == 5
    fs.pipe_file(f"{name}/train/0/obj-000005.bin", b"00000005" + bytes(92))
    fs.invalidate_cache()
    direct = make_dataset(f"s3://{name}/train/0/obj-000005.bin", config, layout="files")
    assert indices(direct) == [5]
    refreshed = make_dataset(f"s3://{name}/train", config, layout="files", refresh_manifest=True)
    assert refreshed.manifest.num_samples == 6 and sorted(indices(refreshed)) == list(range(6))


def test_b18_markers_are_excluded_and_an_empty_object_is_an_empty_sample_in_every_tier(
        s3, bucket, tier_config, make_dataset):
    """Case B18: under data/, a 0-byte ``data/`` marker and ``data/_SUCCESS`` are excluded; the empty
    ``data/empty.bin`` is an empty sample (the documented policy, tierload/layouts/objects.py), cached
    in the hot tier as a complete entry that epoch 2 reads from hot (an empty frame's zstd round
    trip: tests/test_blocks_codec.py)."""
    name, fs = bucket
    fs.pipe_file(f"{name}/data/_SUCCESS", b"")
    fs.call_s3("put_object", Bucket=name, Key="data/", Body=b"")
    fs.pipe_file(f"{name}/data/part-0.bin", b"00000000" + bytes(1000))
    fs.pipe_file(f"{name}/data/empty.bin", b"")
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/data", tier_config(hot="1MiB", warm=None), layout="files")
    assert sorted(b.url.rsplit("/", 1)[-1] for b in dataset.manifest.blocks) == ["empty.bin", "part-0.bin"]
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        got = sorted(bytes(s) for samples, _ in DataLoader(dataset, batch_size=2, collate_fn=collect_raw)
                     for s in samples)
        assert got == [b"", b"00000000" + bytes(1000)]
    stats = dataset.epoch_stats(1)
    assert stats.get("cold_gets", 0) == 0 and stats["hot_hits"] == 2  # the empty entry is complete
    assert dataset.cache_stats()["levels"][0]["blocks"] == 2
