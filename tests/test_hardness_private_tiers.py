"""Issue 26 item 3: everything tierload creates in or for a tier is private (directories 0700,
files 0600) unless the config says shared on purpose.

A real epoch: moto's S3 server over HTTP, the session's local Ray, a node cache with a RAM level
(in ``/dev/shm``) and a disk level whose directory and two parents do not exist yet, a local warm
tier, a manifest cache whose directory does not exist yet, one block streamed into the hot tier a
request at a time. Then every path under the tier and manifest directories is listed with its
mode: directories, blocks, temporary dirs, the owner lock, endpoint, channel socket, key copies,
the cached listing.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from helpers import land_warm_writes, put_indexed_objects

from tierload.node.hot_tier import ram_level_dir

KiB, MiB = 2**10, 2**20


def _modes(root: Path) -> dict[str, tuple[str, int]]:
    """``{path: (kind, permission bits)}`` of ``root`` and everything under it (sockets included)."""
    paths = [str(root)]
    for top, dirs, files in os.walk(root):
        paths += [os.path.join(top, name) for name in dirs + files]
    found = {}
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:  # a temporary file renamed into place meanwhile
            continue
        kind = "dir" if stat.S_ISDIR(mode) else "socket" if stat.S_ISSOCK(mode) else "file"
        found[path] = (kind, stat.S_IMODE(mode))
    return found


@pytest.fixture
def short_root():
    """A short private directory: the channel's socket fits in a Unix socket path there (a file to list)."""
    path = Path(tempfile.mkdtemp(prefix="tlm"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_epoch_leaves_every_tier_path_owner_only(bucket, tier_config, make_dataset, tmp_path, short_root):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 20, size=100 * KiB)
    fs.pipe_file(f"{name}/ds/9/big.bin", b"99999999" + os.urandom(3 * MiB))  # streamed: 3 requests
    fs.invalidate_cache()
    config = tier_config(hot="4MiB", warm="64MiB", cold={"max_request_bytes": "1MiB"})
    hot = short_root / "made" / "for" / "hot"  # it and both parents are created by tierload
    manifests = tmp_path / "made" / "manifests"  # the listing's cache: it and its parent created by tierload
    config = config.model_copy(update={"hot": config.hot.model_copy(update={"dir": str(hot),
                                                                            "ram_capacity_bytes": MiB}),
                                       "manifest": config.manifest.model_copy(update={"cache_dir": str(manifests)})})
    previous = os.umask(0o022)  # the usual umask, which left the hot tier 0755 / 0644 before
    try:
        dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
        for epoch in (0, 1):
            dataset.set_epoch(epoch)
            assert len(list(dataset)) == 21
        land_warm_writes(dataset)
    finally:
        os.umask(previous)

    ram = Path(ram_level_dir(str(hot)))
    try:
        modes = {**_modes(short_root / "made"), **_modes(ram), **_modes(tmp_path / "warm"),
                 **_modes(tmp_path / "made")}
    finally:
        shutil.rmtree(ram, ignore_errors=True)  # outside tmp_path (in /dev/shm): not left behind
    kinds = {path: kind for path, (kind, _) in modes.items()}
    # The walk saw what an epoch makes: block files in both hot levels and in warm, the lock,
    # endpoint, socket and key copy beside the hot tier.
    names = {os.path.basename(path) for path in modes}
    assert {".tierload-owner.lock", ".tierload-key", ".tierload-tier", ".tmp"} <= names
    # The channel's socket is a file beside the hot tier (the short root keeps its path within a
    # Unix socket's limit; a longer one would live in Linux's abstract namespace, no file).
    assert not dataset._endpoint.address.startswith("\0") and "socket" in kinds.values(), dataset._endpoint.address
    assert any(p.startswith(f"{manifests}/") and p.endswith(".arrow") for p in modes), "no cached manifest listed"
    for root in (hot, ram, tmp_path / "warm"):
        blocks = [p for p in modes if p.startswith(f"{root}/") and kinds[p] == "file"
                  and not os.path.basename(p).startswith(".tierload")]
        assert blocks, f"no block file under {root}"
    wrong = {path: f"{kind} {mode:04o}" for path, (kind, mode) in modes.items()
             if mode != (0o700 if kind == "dir" else 0o600)}
    assert wrong == {}


def test_shared_on_purpose_keeps_the_umask(tmp_path):
    """``hot.shared`` / ``warm.shared``: directories and files take the process's umask, as before."""
    from tierload.stores.dir_trust import make_private_dirs, open_new_file

    previous = os.umask(0o022)
    try:
        make_private_dirs(tmp_path / "a" / "b", shared=True)
        open_new_file(tmp_path / "a" / "b" / "f", shared=True).close()
        make_private_dirs(tmp_path / "c" / "d")
        open_new_file(tmp_path / "c" / "d" / "f").close()
    finally:
        os.umask(previous)
    assert {p: f"{stat.S_IMODE(os.stat(tmp_path / p).st_mode):04o}" for p in ("a", "a/b", "a/b/f", "c", "c/d",
                                                                             "c/d/f")} == {
        "a": "0755", "a/b": "0755", "a/b/f": "0644", "c": "0700", "c/d": "0700", "c/d/f": "0600"}
