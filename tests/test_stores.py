"""Every first-class cold store against a real server on 127.0.0.1 (issue 24 item 1): S3 (moto),
GCS (fake-gcs-server, read through tests/gcs_preconditions.py, which enforces the read's
precondition as real GCS does: the emulator ignores it), Azure Blob (Azurite), HTTP (a
Range/ETag/If-Match file server) and file://.

Per store: the listing (exact URLs, sizes), exact ranges with hundreds of reads in flight, a
changed object refused by the condition sent on the read (412 from the server itself), typed
errors naming the store's URL, and an epoch through TieredDataset on a real local Ray.
"""

from __future__ import annotations

import os
import random
import time
import uuid

import pytest
from helpers import index_of
from torch.utils.data import DataLoader

from tierload.config.loading import load_config
from tierload.errors import ConfigError, SourceChangedError, SourceNotFoundError
from tierload.stores.cold.source import ColdSource


class Store:
    """One store's test face: where a fresh prefix lives, how to write an object, its options."""

    def __init__(self, kind, server, tmp_path):
        self.kind, self.server = kind, server
        self.root = uuid.uuid4().hex[:10]
        if kind == "http":
            self.base = f"{server.url}/{self.root}"
        elif kind == "gcs":
            server.create_bucket(self.root)
            self.base = f"gs://{self.root}"
        elif kind == "azure":
            server.create_container(self.root)
            self.base = f"az://{self.root}"
        elif kind == "s3":
            server.create_bucket(self.root)
            self.base = f"s3://{self.root}"
        else:
            self.base = f"file://{tmp_path}/{self.root}"

    @property
    def storage_options(self) -> dict:
        return {} if self.kind in ("http", "file") else self.server.storage_options

    def put(self, key: str, data: bytes) -> None:
        if self.kind in ("http", "file"):
            path = (os.path.join(self.server.root, self.root, key) if self.kind == "http"
                    else os.path.join(self.base.removeprefix("file://"), key))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            before = os.stat(path).st_mtime_ns if os.path.exists(path) else None
            with open(path, "wb") as handle:
                handle.write(data)
            if before is not None and os.stat(path).st_mtime_ns == before:  # a coarse clock: still a new version
                os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
        elif self.kind == "s3":
            fs = self.server.filesystem()
            fs.pipe_file(f"{self.root}/{key}", data)
        else:
            self.server.put(self.root, key, data)

    def put_indexed(self, prefix: str, count: int, size: int = 64, classes: int = 2) -> dict[str, bytes]:
        written = {}
        for index in range(count):
            body = f"{index:08d}".encode() + bytes(random.Random(index).getrandbits(8) for _ in range(size - 8))
            key = f"{prefix}/{index % classes}/obj-{index:06d}.bin"
            self.put(key, body)
            written[f"{self.base}/{key}"] = body
        return written


STORES = ["s3", "gcs", "azure", "http", "file"]


@pytest.fixture(params=STORES)
def store(request, tmp_path):
    server = {"s3": "s3", "gcs": "gcs_checked_store", "azure": "azure_store", "http": "http_store",
              "file": None}[request.param]
    return Store(request.param, request.getfixturevalue(server) if server else None, tmp_path)


def source_of(store, prefix, **cold):
    config = load_config({"cold": {"storage_options": store.storage_options, **cold}})
    return ColdSource(f"{store.base}/{prefix}", config.cold)


def test_listing_gives_every_object_once_with_its_store_url_and_size(store):
    written = store.put_indexed("ds", 7, size=100 + 3)
    source = source_of(store, "ds")
    listed = source.list_objects()
    assert [obj.url for obj in listed] == sorted(written)
    assert [obj.size for obj in listed] == [len(written[url]) for url in sorted(written)]
    assert all(obj.version for obj in listed)


def test_hundreds_of_ranges_in_flight_come_back_exact_in_request_order(store):
    written = store.put_indexed("many", 12, size=4000)
    source = source_of(store, "many", max_in_flight=256, max_request_bytes=1000)
    listed = {obj.url: obj for obj in source.list_objects()}
    rng = random.Random(11)
    wanted = []
    for _ in range(300):
        obj = listed[rng.choice(sorted(listed))]
        offset = rng.randrange(obj.size)
        wanted.append((obj.url, obj.version, offset, rng.randrange(1, obj.size - offset + 1)))
    tally: dict = {}
    got = source.read_ranges(wanted, tally)
    assert got == [written[url][offset:offset + length] for url, _, offset, length in wanted]
    assert tally["cold_bytes"] == sum(length for *_, length in wanted)


def test_a_changed_object_is_refused_by_the_read_and_the_error_names_the_store_url(store):
    store.put_indexed("changed", 2)
    source = source_of(store, "changed")
    first = source.list_objects()[0]
    time.sleep(0.01)
    store.put(first.url.removeprefix(store.base + "/"), b"changed!" * 8)
    with pytest.raises(SourceChangedError) as raised:
        source.read(first.url, first.version, 0, first.size)
    assert raised.value.url == first.url
    assert "127.0.0.1" not in str(raised.value) or store.kind == "http"


def test_a_missing_object_is_a_typed_error_naming_its_store_url(store):
    """Gone: not found, or (a server that evaluates If-Match first, RFC 9110 13.1.1) changed."""
    store.put_indexed("gone", 1)
    source = source_of(store, "gone")
    url = f"{store.base}/gone/0/nothing-here.bin"
    with pytest.raises((SourceNotFoundError, SourceChangedError)) as raised:
        source.read(url, '"x"', 0, 10)
    assert raised.value.url == url
    assert "127.0.0.1" not in str(raised.value) or store.kind == "http"


def _loader(dataset):
    return DataLoader(dataset, batch_size=4, num_workers=0, collate_fn=lambda batch: [item[0] for item in batch])


@pytest.fixture(scope="module")
def uncached_datasets(module_tier_config, module_dataset):
    """Factory for TieredDatasets with nothing cached (no hot or warm tier), all on one node cache.

    The stores' epoch tests share this deployment (one node cache and coordinator process instead
    of one per store, ~1.5 CPU-s each): with no tier every read goes to the store, and each
    registration carries its own store's location and options, so no test sees another's data.
    """
    def make(url, storage_options):
        config = module_tier_config(hot=0, warm=None, cold={"storage_options": storage_options})
        return module_dataset(url, config, layout="files", storage_options=storage_options)
    return make


def test_an_epoch_through_tiered_dataset_gives_every_sample_exactly_and_a_changed_object_fails_it(
        store, uncached_datasets):
    written = store.put_indexed("epoch", 10, size=256)
    # nothing cached: every read of both datasets goes to the store
    dataset = uncached_datasets(f"{store.base}/epoch", store.storage_options)
    samples = [bytes(sample) for batch in _loader(dataset) for sample in batch]
    assert sorted(samples, key=index_of) == sorted(written.values(), key=index_of)
    changed = sorted(written)[3]
    time.sleep(0.01)
    store.put(changed.removeprefix(store.base + "/"), b"99999999" + bytes(248))
    stale = uncached_datasets(f"{store.base}/epoch", store.storage_options)  # the cached manifest: the old version
    with pytest.raises(SourceChangedError):
        [sample for batch in _loader(stale) for sample in batch]


def test_memory_store_reads_in_process_and_a_dataset_refuses_it_at_start(tier_config, ray_session):
    import fsspec

    from tierload.loader.dataset import TieredDataset

    memory = fsspec.filesystem("memory")
    prefix = f"/mem-{uuid.uuid4().hex[:8]}"
    memory.pipe({f"{prefix}/a.bin": b"alpha", f"{prefix}/b.bin": b"bravo!"})
    source = ColdSource(f"memory://{prefix}", load_config({}).cold)
    listed = source.list_objects()
    assert [source.read(obj.url, obj.version) for obj in listed] == [b"alpha", b"bravo!"]
    memory.pipe(f"{prefix}/a.bin", b"ALPHA")
    with pytest.raises(SourceChangedError):
        source.read(listed[0].url, listed[0].version)
    with pytest.raises(ConfigError, match="lives inside this process"):
        TieredDataset(f"memory://{prefix}", tier_config(), layout="files")


def test_a_store_whose_client_is_not_installed_names_the_extra(monkeypatch):
    import sys

    from tierload.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "obstore", None)  # an import of it fails, as where it is not installed
    source = ColdSource("az://container/prefix", load_config({}).cold)
    with pytest.raises(MissingDependencyError, match=r"tierload\[azure\]") as raised:
        source.list_objects()
    assert raised.value.extra == "azure"


@pytest.mark.parametrize("outage, max_attempts", [(2, 3), (10, 3)], ids=["shorter-than-budget", "longer"])
def test_obstore_reads_go_through_the_one_retry_layer(http_store, tmp_path, outage, max_attempts):
    """503s from the HTTP server: an outage shorter than cold.max_attempts costs time, not the read;
    a longer one costs exactly max_attempts GETs, then a transient error naming the object's URL."""
    from tierload.errors import TransientBackendError

    store = Store("http", http_store, tmp_path)
    written = store.put_indexed("flaky", 1, size=500)
    source = source_of(store, "flaky", max_attempts=max_attempts, outage_budget_s=0)
    obj = source.list_objects()[0]
    path = obj.url.removeprefix(http_store.url)
    http_store.server.unavailable[path] = outage
    tally: dict = {}
    if outage < max_attempts:
        assert source.read(obj.url, obj.version, 0, obj.size, tally) == written[obj.url]
        assert http_store.server.gets[path] == outage + 1 == tally["cold_gets"]
    else:
        with pytest.raises(TransientBackendError, match=f"cold.max_attempts={max_attempts}") as raised:
            source.read(obj.url, obj.version, 0, obj.size, tally)
        assert raised.value.url == obj.url
        assert http_store.server.gets[path] == max_attempts == tally["cold_gets"]
        http_store.server.unavailable[path] = 0
