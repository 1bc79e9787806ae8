"""One contract for every tier backend: local directory, fsspec memory://, and S3 on moto."""

from __future__ import annotations

import os
import pickle
import threading

import pytest

from tierload.stores.fsspec_store import FsspecStore
from tierload.stores.keys import block_key
from tierload.stores.local import LocalDirStore
from tierload.stores.registry import open_store


@pytest.fixture(params=["local", "memory", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalDirStore(tmp_path / "tier")
    if request.param == "memory":
        return FsspecStore(f"memory://tier-{os.getpid()}-{id(tmp_path)}", tier="warm")
    s3 = request.getfixturevalue("s3")
    name, _ = request.getfixturevalue("bucket")
    return FsspecStore(f"s3://{name}/warm", tier="warm", storage_options=s3.storage_options)


KEY = block_key("s3://b/some object.png", '"v1"')
OTHER = block_key("s3://b/other", '"v1"')


def test_put_get_range_contains_delete(store):
    assert not store.contains(KEY)
    with pytest.raises(KeyError):
        store.read(KEY)
    store.write(KEY, b"0123456789")
    assert store.contains(KEY) and store.read(KEY) == b"0123456789"
    assert store.read_range(KEY, 2, 5) == b"234"
    store.write(KEY, b"replaced")  # overwrite is atomic too
    assert store.read(KEY) == b"replaced"
    assert store.scan() == {KEY: len(b"replaced")}
    assert store.delete(KEY) and not store.delete(KEY)
    assert store.scan() == {}


def test_empty_block(store):
    store.write(KEY, b"")
    assert store.contains(KEY) and store.read(KEY) == b""


def test_store_pickles_and_works_after(store):
    store.write(KEY, b"abc")
    clone = pickle.loads(pickle.dumps(store))
    assert clone.read(KEY) == b"abc"


def test_concurrent_readers_and_a_writer_never_see_partial_data(store):
    payloads = [bytes([i]) * 200_000 for i in range(1, 6)]
    store.write(OTHER, payloads[0])
    seen, errors = [], []

    def reader():
        for _ in range(20):
            try:
                data = store.read(OTHER)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)
                return
            seen.append(data)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for payload in payloads[1:]:
        store.write(OTHER, payload)
    for t in threads:
        t.join()
    assert not errors
    assert all(data in payloads for data in seen)  # every read is one complete version


def test_malformed_keys_never_reach_the_file_system(store):
    for bad in ("../escape-" + "0" * 32, "a/b", ""):
        with pytest.raises(ValueError):
            store.write(bad, b"x")


def test_local_scan_sweeps_temporary_files_of_dead_writers(tmp_path):
    store = LocalDirStore(tmp_path / "tier")
    store.write(KEY, b"complete")
    dead = tmp_path / "tier" / ".tmp" / f"{OTHER}.999999999.abcd"
    dead.write_bytes(b"half a bl")
    alive = tmp_path / "tier" / ".tmp" / f"{OTHER}.{os.getpid()}.abcd"
    alive.write_bytes(b"in progress")
    assert store.scan() == {KEY: 8}  # the partial file is never a block
    assert not dead.exists() and alive.exists()


def test_registry_picks_the_backend_by_url(tmp_path):
    assert isinstance(open_store(str(tmp_path / "a"), "hot"), LocalDirStore)
    assert isinstance(open_store(f"file://{tmp_path}/b", "hot"), LocalDirStore)
    assert isinstance(open_store("memory://x", "warm"), FsspecStore)
