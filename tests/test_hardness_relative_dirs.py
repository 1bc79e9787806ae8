"""Hardness (issue 26 #6, case B60): relative tier paths with Ray's workers in another working directory.

The session's Ray was started from pytest's working directory, so its workers (the node cache,
the coordinator) work there; the training process here works in a directory of its own and
names its tiers relative to it. Every tier file must land under the directories it named.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from helpers import index_of, land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.config.loading import load_config


def _files_under(root: Path) -> list[Path]:
    return [Path(folder) / name for folder, _, names in os.walk(root) for name in names]


def test_relative_tier_paths_land_where_the_training_process_named_them(make_dataset, bucket, tmp_path,
                                                                        monkeypatch, ray_session):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/rel", 12, size=64)

    @ray_session.remote
    def working_directory() -> str:
        return os.getcwd()

    workers_cwd = Path(ray_session.get(working_directory.remote()))
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.chdir(job)
    assert workers_cwd.resolve() != job.resolve()  # else this test proves nothing
    # Names of their own, so a stray copy under the workers' directory is this test's alone.
    hot, warm, manifests = f"hot-{tmp_path.name}", f"warm-{tmp_path.name}", f"manifests-{tmp_path.name}"
    strays = [workers_cwd / hot, workers_cwd / warm, workers_cwd / manifests]
    try:
        config = load_config({"hot": {"dir": hot, "capacity_bytes": "64MiB"},
                              "warm": {"url": warm, "capacity_bytes": "64MiB"},
                              "manifest": {"cache_dir": manifests, "pack_target_bytes": 0}})
        dataset = make_dataset(f"s3://{name}/rel", config, shuffle=False)
        got = [bytes(sample) for batch in DataLoader(dataset, batch_size=4, collate_fn=lambda b: [s[0] for s in b])
               for sample in batch]
        assert sorted(got) == sorted(payloads) and [index_of(s) for s in got] == list(range(12))
        land_warm_writes(dataset)
        stats = dataset.cache_stats()
        assert _files_under(job / hot), "no hot tier file under the hot.dir the user named"
        assert len([f for f in _files_under(job / warm) if f.name != ".tierload-key"]) >= 1, stats
        assert _files_under(job / manifests), "no manifest under the manifest.cache_dir the user named"
        assert not [path for path in strays if path.exists()], "tier files under Ray's workers' directory"
        # Resolved once, where the config was read: what travels to the actors is absolute.
        assert config.hot.dir == str(job / hot)
        assert config.warm.url == str(job / warm)
        assert load_config({"warm": {"url": f"file://{warm}"}}).warm.url == f"file://{job / warm}"
        assert config.manifest.cache_dir == str(job / manifests)
    finally:
        for path in strays:  # the defect's own litter, if any
            shutil.rmtree(path, ignore_errors=True)


def test_relative_tier_paths_from_the_environment_and_a_yaml_file_are_resolved_where_read(tmp_path, monkeypatch):
    """The same rule for the other ways a config arrives (a Dockerfile's ENV, a job's YAML): made
    absolute against the working directory of the process that reads them, before they travel."""
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.chdir(job)
    from_environment = load_config(environ={"TIERLOAD_HOT__DIR": "hot", "TIERLOAD_WARM__URL": "file://warm",
                                            "TIERLOAD_MANIFEST__CACHE_DIR": "manifests"})
    assert (from_environment.hot.dir, from_environment.warm.url, from_environment.manifest.cache_dir) == (
        str(job / "hot"), f"file://{job / 'warm'}", str(job / "manifests"))
    path = job / "job.yaml"
    path.write_text("hot: {dir: hot}\nwarm: {url: warm}\nmanifest: {cache_dir: manifests}\n", encoding="utf-8")
    from_file = load_config(str(path), environ={})
    assert (from_file.hot.dir, from_file.warm.url, from_file.manifest.cache_dir) == (
        str(job / "hot"), str(job / "warm"), str(job / "manifests"))
