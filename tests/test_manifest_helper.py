"""The manifest is listed and written by a forked helper process; the caller maps the file (issue 25, item 1).

Real moto S3 (and the fault-injecting proxy in front of it), real forked children, real files:
the helper's file is the manifest an in-process build makes, a cached file is mapped without a
helper, and what goes wrong in the helper (a refused listing, an empty prefix, a child that dies
before answering) reaches the caller as a typed error that names the URL and the helper. An
interrupted caller ends its helper and leaves no partial file; where Ray runs, the helper is forked too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cases_common import proxied
from faulty_s3 import FaultyS3
from helpers import put_indexed_objects

from tierload.config.models import ColdConfig, ManifestConfig
from tierload.data.manifest import cache_path, partial_path
from tierload.data.manifest_build import build_manifest
from tierload.data.manifest_helper import ManifestJob, fork_refused, load_manifest_apart, run_helper
from tierload.errors import AccessDeniedError, ManifestError
from tierload.stores.cold.source import ColdSource

OBJECTS = 30


def _settings(tmp_path, **fields) -> ManifestConfig:
    return ManifestConfig(cache_dir=str(tmp_path / "manifests"), pack_target_bytes=0, **fields)


def _source(url: str, storage_options: dict) -> ColdSource:
    return ColdSource(url, ColdConfig(storage_options=storage_options, max_attempts=2, outage_budget_s=1.0))


def test_the_helper_writes_the_manifest_an_in_process_build_makes(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=100)
    source, settings = _source(f"s3://{name}/ds", s3.storage_options), _settings(tmp_path)

    answer = run_helper(ManifestJob(source, settings, "files"))
    assert answer.pid != os.getpid()  # listed and written in another process
    assert answer.path == str(cache_path(source, settings, "files"))

    mapped, path = load_manifest_apart(source, settings, "files")  # the helper's file, mapped here
    assert str(path) == answer.path
    here = build_manifest(source, settings, "files")
    assert mapped.dataset_id == here.dataset_id
    assert mapped.num_samples == here.num_samples == OBJECTS
    assert [block.key for block in mapped.blocks] == [block.key for block in here.blocks]
    assert mapped.sample_block.tolist() == here.sample_block.tolist()


def test_a_cached_manifest_is_mapped_without_a_helper_and_refresh_lists_again(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=100)
    source, settings = _source(f"s3://{name}/ds", s3.storage_options), _settings(tmp_path)

    first, path = load_manifest_apart(source, settings, "files")
    written = path.stat().st_ino
    again, _ = load_manifest_apart(source, settings, "files")
    assert path.stat().st_ino == written  # the same file: nothing listed or written again
    assert again.dataset_id == first.dataset_id

    fs.pipe(f"{name}/ds/extra.bin", b"x" * 100)
    refreshed, _ = load_manifest_apart(source, settings, "files", refresh=True)
    assert path.stat().st_ino != written  # written anew (os.replace of the helper's file)
    assert refreshed.num_samples == OBJECTS + 1


def test_an_unreadable_cached_file_is_listed_again(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=100)
    source, settings = _source(f"s3://{name}/ds", s3.storage_options), _settings(tmp_path)
    path = cache_path(source, settings, "files")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"ARROW1 but cut short")

    manifest, _ = load_manifest_apart(source, settings, "files")
    assert manifest.num_samples == OBJECTS


def test_a_listing_refused_in_the_helper_is_an_access_denied_error_here(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.refused_on_prefix["job-b"] = f"{name}/ds"
        source = _source(f"s3://{name}/ds", proxied(s3, proxy, key="job-b", secret="secret-of-job-b"))
        with pytest.raises(AccessDeniedError) as refused:
            load_manifest_apart(source, _settings(tmp_path), "files")
        assert proxy.faults.refused["job-b"] >= 1  # the helper's listing reached the store and was refused
    assert refused.value.url is not None and name in refused.value.url
    assert "manifest helper" in refused.value.where
    assert not cache_path(source, _settings(tmp_path), "files").exists()


def test_an_empty_prefix_is_a_manifest_error_from_the_helper(s3, bucket, tmp_path):
    name, _ = bucket
    source = _source(f"s3://{name}/nothing-here", s3.storage_options)
    with pytest.raises(ManifestError, match="holds no objects") as empty:
        load_manifest_apart(source, _settings(tmp_path), "files")
    assert "manifest helper" in empty.value.where


class _DiesInTheHelper(ColdSource):
    """A source whose listing ends the process at once, as a crash in the helper would."""

    def list_objects(self, exclude=(), spill_dir=None):
        print("the helper dies listing in test_manifest_helper", file=sys.stderr, flush=True)
        os._exit(3)


def test_a_helper_that_dies_before_answering_is_a_manifest_error_with_its_exit_code(s3, bucket, tmp_path):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 3, size=100)
    source = _DiesInTheHelper(f"s3://{name}/ds", ColdConfig(storage_options=s3.storage_options))
    with pytest.raises(ManifestError, match="no answer") as died:
        load_manifest_apart(source, _settings(tmp_path), "files")
    assert "exit code 3" in str(died.value) and "test_manifest_helper" in str(died.value)  # its stderr
    assert not cache_path(source, _settings(tmp_path), "files").exists()


class _ListsForever(ColdSource):
    """A source whose listing leaves a partial manifest file (as a writer stopped mid-write would)
    and hangs: the caller gives up and must end it and its file."""

    def list_objects(self, exclude=(), spill_dir=None):
        path = cache_path(self, ManifestConfig(cache_dir=spill_dir, pack_target_bytes=0), "files")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial_path(path, os.getpid()).write_bytes(b"ARROW1 half written")
        (path.parent / "helper.pid").write_text(str(os.getpid()))
        time.sleep(120)


@pytest.mark.parametrize("stop", ["interrupt", "timeout"])
def test_an_interrupted_caller_ends_the_helper_and_leaves_no_partial_file(tmp_path, stop):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"x" * 10)
    source, settings = _ListsForever(f"file://{data}", ColdConfig()), _settings(tmp_path)

    def interrupt(signum, frame):
        raise KeyboardInterrupt  # what Ctrl-C (or a SIGTERM handler) raises in the caller

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        if stop == "interrupt":
            signal.alarm(3)
            with pytest.raises(KeyboardInterrupt):
                load_manifest_apart(source, settings, "files")
        else:
            with pytest.raises(ManifestError, match="ran past timeout_s=3"):
                load_manifest_apart(source, settings, "files", timeout_s=3)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    manifests = tmp_path / "manifests"
    helper = int((manifests / "helper.pid").read_text())  # it got as far as its partial file
    assert helper != os.getpid()
    with pytest.raises(ChildProcessError):
        os.waitpid(helper, os.WNOHANG)  # ended and reaped by the caller
    assert sorted(p.name for p in manifests.iterdir()) == ["helper.pid"]  # no manifest, no partial file


def test_the_helper_is_forked_where_ray_runs(ray_session, s3, bucket, tmp_path):
    """A process with Ray initialised (a Ray Train worker) forks the helper as torch forks its
    DataLoader workers there: the child never uses Ray's threads or sockets, and Ray goes on."""
    import ray

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=100)
    source, settings = _source(f"s3://{name}/ds", s3.storage_options), _settings(tmp_path)
    assert ray.is_initialized() and fork_refused(source) is None
    answer = run_helper(ManifestJob(source, settings, "files"))
    assert answer.pid != os.getpid()
    manifest, path = load_manifest_apart(source, settings, "files")
    assert str(path) == answer.path and manifest.num_samples == OBJECTS
    assert ray.get(ray.put(b"still here")) == b"still here"  # this process's Ray survived the fork


PROBE = """
import os, sys
from tierload.config.models import ColdConfig, ManifestConfig
from tierload.data.manifest_helper import ManifestJob, run_helper
from tierload.stores.cold.source import ColdSource
import tierload.data.layouts.objects

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "ray"):
            with open(sys.argv[3], "a") as seen:
                print(name, file=seen)
            raise ImportError(name + " imported by the manifest helper")
        return None

assert "torch" not in sys.modules and "ray" not in sys.modules, "imported by the caller"
sys.meta_path.insert(0, Refuse())  # inherited by the forked helper
settings = ManifestConfig(cache_dir=sys.argv[2], pack_target_bytes=0)
answer = run_helper(ManifestJob(ColdSource(sys.argv[1], ColdConfig()), settings, "files"))
print(answer.pid != os.getpid(), answer.path)
"""


def test_the_helper_plans_a_file_listing_without_importing_torch(tmp_path):
    """torch is ~190 MB and seconds of imports: the helper of an image-folder or file listing does
    without it (the layouts import it where they decode). A fresh interpreter that has not imported
    torch or Ray forks the helper with both refused; the helper lists, plans and writes."""
    data = tmp_path / "data"
    data.mkdir()
    for index in range(5):
        (data / f"{index}.bin").write_bytes(b"x" * 10)
    seen = tmp_path / "imports.txt"
    done = subprocess.run([sys.executable, "-c", PROBE, f"file://{data}", str(tmp_path / "manifests"), str(seen)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    forked, written = done.stdout.split()
    assert forked == "True" and os.path.isfile(written)
    assert not seen.exists()  # neither torch nor Ray was asked for


def test_a_process_that_used_obstore_forks_the_helper_only_for_a_source_with_another_client(s3, bucket, tmp_path):
    """A process that has made obstore clients (it read S3, GCS, Azure or HTTP through obstore)
    still forks the helper for an S3 source: the child lists with s3fs and would read through
    aiobotocore. A source only obstore reads (here HTTP) is built in this process instead."""
    from tierload.stores.cold.obstore_stores import client_for, made_clients_here

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=100)
    source = _source(f"s3://{name}/ds", s3.storage_options)
    client_for(source, "s3", name)  # as the first S3 read through obstore does
    assert made_clients_here() and fork_refused(source) is None
    answer = run_helper(ManifestJob(source, _settings(tmp_path), "files"))
    assert answer.pid != os.getpid() and answer.error is None
    over_http = ColdSource("http://127.0.0.1:9/ds", ColdConfig())
    assert "http://127.0.0.1:9/ds" in (fork_refused(over_http) or "")
    with pytest.raises(ManifestError, match="cannot be forked"):
        run_helper(ManifestJob(over_http, _settings(tmp_path / "other"), "files"))
