"""The manifest is listed and written by a helper process; the caller maps the file (issue 25, item 1).

Real moto S3 (and the fault-injecting proxy in front of it), real child processes, real files:
the helper's file is the manifest an in-process build makes, a cached file is mapped without a
helper, and what goes wrong in the helper (a refused listing, an empty prefix, a child that dies
before answering) reaches the caller as a typed error that names the URL and the helper.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cases_common import proxied
from faulty_s3 import FaultyS3
from helpers import put_indexed_objects

from tierload.config.models import ColdConfig, ManifestConfig
from tierload.data.manifest import build_manifest, cache_path
from tierload.data.manifest_helper import ManifestJob, load_manifest_apart, run_helper
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


class _UnknownToTheHelper(ColdSource):
    """Defined in a test module the helper cannot import: the child dies unpickling its job."""


def test_a_helper_that_dies_before_answering_is_a_manifest_error_with_its_stderr(s3, bucket, tmp_path, monkeypatch):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 3, size=100)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # tests/ off the child's path
    source = _UnknownToTheHelper(f"s3://{name}/ds", ColdConfig(storage_options=s3.storage_options))
    with pytest.raises(ManifestError, match="no answer") as died:
        load_manifest_apart(source, _settings(tmp_path), "files")
    assert "exit code 1" in str(died.value) and "test_manifest_helper" in str(died.value)


def test_the_helper_plans_a_file_listing_without_importing_torch():
    """torch is ~190 MB and seconds of imports: the helper of an image-folder or file listing does
    without it (the layouts import it where they decode)."""
    probe = ("import sys, tierload.data.manifest_helper, tierload.data.layouts.objects; "
             "print(sorted(name for name in ('torch', 'ray') if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
