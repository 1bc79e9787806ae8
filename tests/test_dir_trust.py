"""Tier directories are private unless shared on purpose (issue 13, item 5). Real directories,
real modes and owners (the tests chown to another uid where they run as root)."""

from __future__ import annotations

import os
import stat

import pytest

from tierload.config.loading import load_config
from tierload.errors import ConfigError, UntrustedDirError
from tierload.node.node_cache import NodeCache
from tierload.stores.local import LocalDirStore

OTHER_UID = 65534  # nobody


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_default_hot_dir_is_per_user():
    assert load_config(environ={}).hot.dir == f"/tmp/tierload-{os.geteuid()}/hot"
    assert load_config({"hot": {"dir": "/scratch/{uid}/{node}"}}).hot.dir == f"/scratch/{os.geteuid()}/{{node}}"


def test_a_missing_tier_dir_and_its_missing_parents_are_created_owner_only(tmp_path):
    os.umask(old := os.umask(0o022))
    try:
        store = LocalDirStore(tmp_path / "made" / "for" / "hot", tier="hot-disk")
    finally:
        os.umask(old)
    for path in (tmp_path / "made", tmp_path / "made" / "for", store.root):
        assert _mode(path) == 0o700, path


def test_a_tier_dir_others_may_write_is_refused_naming_dir_mode_and_key(tmp_path):
    """Case F07. Another user made the directory first, mode 0777: tierload does not use it."""
    hot = tmp_path / "hot"
    hot.mkdir()
    hot.chmod(0o777)
    with pytest.raises(UntrustedDirError) as info:
        LocalDirStore(hot, tier="hot-disk")
    message = str(info.value)
    assert str(hot) in message and "0777" in message and "hot.shared: true" in message
    assert isinstance(info.value, ConfigError)
    assert LocalDirStore(hot, tier="hot-disk", shared=True).root == hot  # shared on purpose


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_a_tier_dir_another_user_owns_is_refused(tmp_path):
    warm = tmp_path / "warm"
    warm.mkdir(mode=0o700)
    os.chown(warm, OTHER_UID, -1)
    with pytest.raises(UntrustedDirError, match=rf"owned by .*uid {OTHER_UID}.*warm\.shared: true"):
        LocalDirStore(warm, tier="warm")


def test_a_parent_others_may_write_is_refused_unless_sticky(tmp_path):
    parent = tmp_path / "open"
    parent.mkdir()
    parent.chmod(0o777)
    with pytest.raises(UntrustedDirError, match="a parent of the tier directory"):
        LocalDirStore(parent / "hot", tier="hot-disk")
    parent.chmod(0o1777)  # like /tmp: nobody can rename what is not theirs
    assert _mode(LocalDirStore(parent / "hot", tier="hot-disk").root) == 0o700


def test_the_node_cache_refuses_an_untrusted_hot_dir(tmp_path):
    """Case F07: the node cache refuses a pre-created group-writable hot dir before it publishes an endpoint"""
    hot = tmp_path / "hot"
    hot.mkdir()
    hot.chmod(0o775)
    cache = NodeCache(load_config({"hot": {"dir": str(hot)}, "warm": {"url": None}}), node_id="n1")
    with pytest.raises(UntrustedDirError, match="hot-disk tier directory"):
        cache.start()
    assert not (hot / ".endpoint.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_the_control_files_beside_a_read_only_hot_dir_are_never_taken_from_another_users_dir(tmp_path):
    """The directory that holds a read-only hot dir's lock, endpoint and key (in /dev/shm, where
    anyone may make a directory) is checked on every use: one another user made first, with
    their own key in it, is refused, not read."""
    import shutil

    from tierload.frames.checksum_key import node_key
    from tierload.stores.control_dir import control_dir, fallback_dir

    hot = tmp_path / "hot"
    hot.mkdir(mode=0o700)
    planted = fallback_dir(hot)
    os.mkdir(planted, 0o700)
    try:
        with open(os.path.join(planted, ".tierload-key"), "wb") as handle:
            handle.write(bytes(32))  # a key its maker knows
        os.chown(planted, OTHER_UID, OTHER_UID)
        with pytest.raises(UntrustedDirError, match="nobody"):
            control_dir(hot)
        with pytest.raises(UntrustedDirError):
            node_key(hot, create=False)
        os.chown(planted, os.geteuid(), os.getegid())
        assert control_dir(hot) == planted  # once it exists (and is ours), every process looks there first
    finally:
        shutil.rmtree(planted, ignore_errors=True)
    assert control_dir(hot) == os.path.realpath(hot)  # a writable hot dir holds its own
