"""The AWS credential chain in every process that reads S3 (issue 12 item 5).

moto accepts any key, so the fault proxy in front of it records the access key id of every
signed request and refuses (403 InvalidAccessKeyId) any key but the one the test allows: a
process that fell back to other credentials (or found none) fails or shows up in the counts.
The chain's settings are exported only in the training process, after Ray started, as a user
does with ``AWS_PROFILE=... python train.py`` on a running cluster.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from cases_common import collect_raw
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.config.models import ColdConfig
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.source import ColdSource

PROFILE_KEY = "PROFILEKEYAAAAAAAAAA"
PROFILE_SECRET = "profile-secret-never-logged"
PROCESS_KEY = "PROCKEYSLOWAAAAAAAAA"
CHAIN_ENVIRONMENT = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                     "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


@pytest.fixture
def profile_only(tmp_path, monkeypatch, faulty_s3):
    """A profile in a shared credentials file, named only in this process's environment."""
    for name in CHAIN_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "aws" / "credentials"
    credentials.parent.mkdir()
    credentials.write_text(f"[tierload-test]\naws_access_key_id = {PROFILE_KEY}\n"
                           f"aws_secret_access_key = {PROFILE_SECRET}\n")
    config = tmp_path / "aws" / "config"
    config.write_text("[profile tierload-test]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_PROFILE", "tierload-test")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    faulty_s3.faults.allowed_access_keys = {PROFILE_KEY}
    return {"client_kwargs": {"endpoint_url": faulty_s3.endpoint_url, "region_name": "us-east-1"}}


@pytest.fixture(scope="module")
def shared_dataset(module_tier_config, module_dataset):
    """Like ``make_dataset`` with ``tier_config(warm=None)``, on one deployment for the module's two
    dataset tests instead of one each (~1.5 CPU-s a deployment). Each reads its own bucket through
    its own proxy; the credentials travel in each dataset's registration, not in the deployment."""
    config = module_tier_config(warm=None)

    def make(url, **kwargs):
        return module_dataset(url, config, layout="files", **kwargs)
    return make


def test_a_profile_named_only_in_the_training_process_reaches_the_node_cache(
        bucket, shared_dataset, faulty_s3, profile_only, caplog):
    """Case B41: AWS_PROFILE set only here (Ray already running): the node cache signs with the profile's key"""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 12, size=1000)
    caplog.set_level(logging.DEBUG, logger="tierload")
    dataset = shared_dataset(f"s3://{name}/ds", storage_options=profile_only)
    seen = {index_of(s): bytes(s) for samples, _ in DataLoader(dataset, batch_size=4, collate_fn=collect_raw)
            for s in samples}
    assert seen == dict(enumerate(payloads))
    # The node cache actor (started before AWS_PROFILE was set) fetched every block, with the profile's key.
    assert sum(faulty_s3.faults.gets.values()) >= 12
    assert set(faulty_s3.faults.access_keys) == {PROFILE_KEY}
    assert PROFILE_SECRET not in repr(dataset._cold) and PROFILE_SECRET not in caplog.text


_READER = textwrap.dedent("""
    import pickle, sys
    location, config, url, version, size = pickle.loads(sys.stdin.buffer.read())
    from tierload.stores.cold.source import ColdSource
    source = ColdSource(location, config)
    sys.stdout.write(str(len(source.read(url, version, 0, size))) + " " + str(len(source.read(url, version, 0, size))))
""")


def _read_in_a_clean_process(location: ColdLocation, config: ColdConfig, url: str, version: str, size: int) -> str:
    """Read ``url`` twice in a new process whose environment names no AWS setting at all."""
    environment = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run([sys.executable, "-c", _READER], input=pickle.dumps((location, config, url, version, size)),
                          capture_output=True, env=environment, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done.stdout.decode()


@pytest.mark.parametrize("s3_engine", ["obstore", "aiobotocore"])
def test_a_shipped_location_reads_with_the_profile_in_a_process_without_it(bucket, faulty_s3, profile_only,
                                                                           s3_engine):
    """Case B41: a process with no AWS setting at all reads with the profile the config was read under"""
    name, fs = bucket
    fs.pipe_file(f"{name}/ds/a.bin", b"x" * 500)
    config = ColdConfig(storage_options=profile_only, s3_engine=s3_engine)
    source = ColdSource(ColdLocation.resolve(f"s3://{name}/ds", config), config)
    obj = source.list_objects()[0]
    assert _read_in_a_clean_process(source.location, config, obj.url, obj.version, obj.size) == "500 500"
    assert faulty_s3.faults.gets["ds/a.bin"] == 2
    assert set(faulty_s3.faults.access_keys) == {PROFILE_KEY}
    assert PROFILE_SECRET not in repr(source.location)


@pytest.mark.parametrize("s3_engine", ["obstore", "aiobotocore"])
def test_a_credential_process_stays_refreshable_in_every_process(bucket, tmp_path, monkeypatch, faulty_s3, s3_engine):
    """``credential_process`` credentials about to expire are asked for again, in the reading process."""
    for name in CHAIN_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    calls = tmp_path / "calls"
    helper = tmp_path / "credentials.py"
    # Each call hands out a new key that expires in 5 minutes: botocore refreshes keys with less
    # than 15 minutes left before using them, so every request asks the process again.
    helper.write_text(textwrap.dedent(f"""
        import datetime, json, os
        with open({str(calls)!r}, "a") as log:
            log.write(str(os.getpid()) + "\\n")
        count = sum(1 for _ in open({str(calls)!r}))
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
        print(json.dumps({{"Version": 1, "AccessKeyId": f"PROCKEY{{count:013d}}", "SecretAccessKey": "s",
                          "Expiration": expires.isoformat()}}))
    """))
    config_file = tmp_path / "config"
    config_file.write_text(f"[profile rotating]\ncredential_process = {sys.executable} {helper}\n")
    monkeypatch.setenv("AWS_PROFILE", "rotating")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    name, fs = bucket
    fs.pipe_file(f"{name}/ds/a.bin", b"y" * 300)
    config = ColdConfig(storage_options={"client_kwargs": {"endpoint_url": faulty_s3.endpoint_url,
                                                           "region_name": "us-east-1"}}, s3_engine=s3_engine)
    source = ColdSource(ColdLocation.resolve(f"s3://{name}/ds", config), config)
    obj = source.list_objects()[0]
    listing_keys = set(faulty_s3.faults.access_keys)
    assert _read_in_a_clean_process(source.location, config, obj.url, obj.version, obj.size) == "300 300"
    reader_keys = set(faulty_s3.faults.access_keys) - listing_keys
    assert all(key.startswith("PROCKEY") for key in faulty_s3.faults.access_keys)
    assert len(set(calls.read_text().split())) >= 2  # the process was run by the listing and by the reader
    if s3_engine == "aiobotocore":
        assert len(reader_keys) >= 2  # the reading process asked again: its keys were not frozen at resolve time
        return
    # obstore keeps a key for up to 5 minutes (BotocoreCredentials.HANDED_OUT_S): one for both reads,
    # found by the reader itself; asked again, its provider runs the process again for a new key.
    from tierload.stores.cold.s3_obstore_config import BotocoreCredentials

    assert len(reader_keys) == 1
    provider = BotocoreCredentials(source.location.credential_chain, None)
    first, second = provider(), provider()
    assert first["access_key_id"] != second["access_key_id"] and first["expires_at"] is not None


def test_static_keys_in_the_environment_are_shipped_and_never_shown(monkeypatch):
    for name in CHAIN_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEYAAAAAAAAAAAAAA")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-never-shown")
    location = ColdLocation.resolve("s3://b/p", ColdConfig())
    assert location.storage_options["key"] == "ENVKEYAAAAAAAAAAAAAA"
    assert "env-secret-never-shown" not in repr(location) and "ENVKEY" not in repr(location)
    explicit = ColdLocation.resolve("s3://b/p", ColdConfig(storage_options={"profile": "other"}))
    assert "key" not in explicit.storage_options  # a named profile wins over environment keys, as in botocore
    assert json.dumps(dict(location.credential_chain)) == "{}"


class _FallbackReads(torch.utils.data.Dataset):
    """Block ``i`` of a dataset read the way a DataLoader worker reads it when no node cache
    answers (``BlockReader``'s fallback): a ``DirectSource`` built once in each process."""

    def __init__(self, dataset) -> None:
        self.keys = [block.key for block in dataset.manifest.blocks]
        self.make_source = dataset._direct_source
        self.source = None
        self.pid = None

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> bytes:
        if self.pid != os.getpid():
            self.source, self.pid = self.make_source(), os.getpid()
        return self.source.read(self.keys[index])


def test_b06_sixteen_workers_starting_together_resolve_credentials_from_a_credential_process(
        bucket, shared_dataset, tmp_path, monkeypatch, faulty_s3):
    """Case B06: 16 DataLoader workers start at once, each resolving credentials from a profile's
    credential_process (slow on purpose: all 16 resolutions overlap) to read cold itself (the
    fallback path); then 16 workers read through the node cache. Every sample once, exact bytes,
    every request signed with the process's key (the proxy refuses any other), no error.

    16 is the count the case names; forked workers (no interpreter start) keep the test to seconds
    on 2 cores, and the 16 credential processes are what overlaps."""
    for variable in CHAIN_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    calls = tmp_path / "credential-calls"
    helper = tmp_path / "credentials.py"
    helper.write_text(textwrap.dedent(f"""
        import json, os, time
        time.sleep(0.3)  # a slow provider (SSO, a vault): the 16 workers' resolutions overlap
        with open({str(calls)!r}, "a") as log:
            log.write(str(os.getppid()) + "\\n")
        print(json.dumps({{"Version": 1, "AccessKeyId": {PROCESS_KEY!r}, "SecretAccessKey": "s"}}))
    """))
    config_file = tmp_path / "config"
    config_file.write_text(f"[profile slow]\ncredential_process = {sys.executable} {helper}\n")
    monkeypatch.setenv("AWS_PROFILE", "slow")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config_file))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    faulty_s3.faults.allowed_access_keys = {PROCESS_KEY}
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 48, size=1000)
    options = {"client_kwargs": {"endpoint_url": faulty_s3.endpoint_url, "region_name": "us-east-1"}}
    dataset = shared_dataset(f"s3://{name}/ds", storage_options=options)
    listing_calls = set(calls.read_text().split())

    direct = DataLoader(_FallbackReads(dataset), batch_size=1, num_workers=16, collate_fn=lambda batch: batch[0],
                        multiprocessing_context="fork")
    seen = [bytes(sample) for sample in direct]
    assert sorted(seen) == sorted(payloads) and len(seen) == 48
    resolved_by = set(calls.read_text().split()) - listing_calls
    assert len(resolved_by) >= 16  # each worker ran the credential process itself
    gets = sum(faulty_s3.faults.gets.values())
    assert gets >= 48 and set(faulty_s3.faults.access_keys) == {PROCESS_KEY}

    loader = DataLoader(dataset, batch_size=3, num_workers=16, collate_fn=collect_raw, multiprocessing_context="fork")
    through_cache = {index_of(s): bytes(s) for samples, _ in loader for s in samples}
    assert through_cache == dict(enumerate(payloads))
    assert sum(faulty_s3.faults.gets.values()) >= gets + 48  # the node cache fetched every block from cold
    assert set(faulty_s3.faults.access_keys) == {PROCESS_KEY}
