"""Real-world failure cases from ../shared/cases, turned into tests (IDs in each docstring):
credentials that expire, the S3 endpoint in every process, one cold fetch for many readers.
The other cases: tests/test_cases_recovery.py (crashes, full disks, restarts, leaks) and
tests/test_cases_data.py (what the data looks like: schemas, names, listings, markers).

Everything is real: moto's S3 server over HTTP (behind a fault-injecting proxy where a case
needs a fault), a local Ray, real directories.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import subprocess
import time

import pytest
import rotating_credentials
from cases_common import indices, proxied
from faulty_s3 import FaultyS3
from helpers import put_indexed_objects

from tierload.errors import CredentialsExpiredError
from tierload.stores.cold.identity import identity_of
from tierload.wire.messages import Endpoint, StreamPlan


def test_b06_expired_credentials_are_refreshed_once_and_the_read_retried(s3, bucket, module_tier_config,
                                                                         module_dataset):
    """B06: ExpiredToken on GetObject -> the provider is asked once more, the read is retried."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 50, size=100)
    rotating_credentials.log_path().unlink(missing_ok=True)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.expired_access_keys.add(rotating_credentials.EXPIRED)
        config = module_tier_config(cold={"credential_provider": "rotating_credentials:rotating"})
        dataset = module_dataset(f"s3://{name}/ds", config, layout="files", batch_size=5,
                               storage_options=proxied(s3, proxy))
        assert sorted(indices(dataset, num_workers=2, batch_size=5)) == list(range(50))
        calls = [json.loads(line) for line in rotating_credentials.log_path().read_text().splitlines()]
        # The reader: neither this process nor the manifest helper it forks to list the prefix.
        reader_calls = [c for c in calls if os.getpid() not in (c["pid"], c["ppid"])]
        assert [c["key"] for c in reader_calls] == [rotating_credentials.EXPIRED, rotating_credentials.FRESH]
        # Hot hits need no credentials: a second epoch from the hot tier asks for none.
        dataset.set_epoch(1)
        assert sorted(indices(dataset)) == list(range(50))
        assert len(rotating_credentials.log_path().read_text().splitlines()) == len(calls)


def test_b06_a_second_expiry_reaches_the_user(s3, bucket, module_tier_config, module_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 3, size=100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.expired_access_keys.add(rotating_credentials.EXPIRED)
        config = module_tier_config(cold={"credential_provider": "rotating_credentials:always_expired"})
        dataset = module_dataset(f"s3://{name}/ds", config, layout="files", storage_options=proxied(s3, proxy))
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
def test_b07_the_endpoint_reaches_every_process(s3, bucket, module_tier_config, module_dataset, monkeypatch, how,
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
        dataset = module_dataset(f"s3://{name}/ds", module_tier_config(cold={"region": "eu-west-3"}),
                               endpoint_url=s3.endpoint_url, storage_options=credentials, **kwargs)
    elif how == "storage_options":
        options = {**credentials, "client_kwargs": {"endpoint_url": s3.endpoint_url, "region_name": "eu-west-3"}}
        dataset = module_dataset(f"s3://{name}/ds", module_tier_config(), storage_options=options, **kwargs)
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
        monkeypatch.setenv("AWS_REGION", "eu-west-3")
        dataset = module_dataset(f"s3://{name}/ds", module_tier_config(), storage_options=credentials, **kwargs)
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
    from tierload.loader.consumer import BlockReader, NodeLink

    time.sleep(delay_s)
    link = NodeLink(endpoint, plan.identity)  # the job's own identity: the stream serves it only
    link.call(lambda cache: cache.open_stream(stream_id, 0, 1, plan))
    data = BlockReader(link).read(stream_id, 0, 0, key)
    link.call(lambda cache: cache.close_consumer(stream_id, 0, link.identity))
    return hashlib.sha256(data).hexdigest()


def test_b10_eight_processes_one_cold_fetch(s3, bucket, module_tier_config, module_dataset):
    """B10: 8 processes ask for one 8 MiB object at staggered times while S3 is slow: one GET,
    every reader gets the exact bytes, and the hot file is only ever complete."""
    name, fs = bucket
    payload = os.urandom(8 * 2**20)
    fs.pipe_file(f"{name}/big/one.bin", payload)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.slow_chunk_s = 0.01  # ~1.3 s for the whole object
        dataset = module_dataset(f"s3://{name}/big", module_tier_config(), layout="files",
                               storage_options=proxied(s3, proxy))
        block = dataset.manifest.blocks[0]
        plan = StreamPlan(dataset_id=dataset.manifest.dataset_id, epoch=0, seq=[0], consume_len=1,
                          identity=identity_of(dataset._cold))
        with multiprocessing.get_context("fork").Pool(8) as pool:
            results = [pool.apply_async(_single_reader, (dataset._endpoint, f"b10-{i}", plan, block.key, i * 0.15))
                       for i in range(8)]
            digests = [r.get(timeout=120) for r in results]
        assert digests == [hashlib.sha256(payload).hexdigest()] * 8
        assert proxy.faults.gets["big/one.bin"] == 1  # single flight
