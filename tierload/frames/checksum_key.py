"""The deployment's checksum key: where it lives, made once, read by every process that checks frames.

Frames carry a keyed checksum (:func:`tierload.frames.checksum.checksum` with this key), so a block
file not written by tierload, even one with a valid header, fails its check and is fetched
again. Every process that writes or checks frames of one deployment must hold the same key:

* With a local warm directory (a shared mount every node sees), the key is
  ``<warm>/.tierload-key``: all nodes and jobs of the deployment share it through the mount.
* With a warm tier on an object store (``s3://...``), it is the object ``<warm url>/.tierload-key``.
* Without a warm tier, the coordinator hands every node the first key a node offered
  (:meth:`tierload.coordinator.actor.Coordinator.checksum_key`), so peers' frames check; a
  node cache with no coordinator uses ``<hot dir>/.tierload-key``.

"In the hot directory" means where its control files are (:mod:`tierload.stores.control_dir`):
beside it while it is read-only, and then the key a read-only hot directory holds itself (left
by the run that filled it) is the one this node offers, so the blocks it holds still check.

Each node cache keeps a copy in its hot directory, beside its endpoint, where its consumers
(DataLoader workers) read it, and which it offers to a restarted coordinator. Key files are
32 random bytes, owner-only (0600), made with ``O_EXCL`` so that racing processes agree on
the first one written.
"""

from __future__ import annotations

import logging
import os
import secrets
from typing import Callable

from tierload.errors import IntegrityError
from tierload.stores.control_dir import control_dir
from tierload.stores.registry import is_local_url

log = logging.getLogger(__name__)

KEY_FILE = ".tierload-key"
KEY_BYTES = 32  # BLAKE3's key size


def local_key(directory: str | os.PathLike, *, create: bool = True) -> bytes:
    """The key in ``directory``/:data:`KEY_FILE`, made (0600) if missing and ``create``.

    Raises:
        IntegrityError: The file exists but does not hold a key.
        FileNotFoundError: It is missing and ``create`` is False.
    """
    path = os.path.join(os.path.expanduser(str(directory)), KEY_FILE)
    if create:
        candidate = secrets.token_bytes(KEY_BYTES)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(candidate)
            return candidate
    with open(path, "rb") as handle:
        key = handle.read()
    if len(key) != KEY_BYTES:
        raise IntegrityError(f"checksum key file {path!r} holds {len(key)} bytes, not {KEY_BYTES}; remove it "
                             "(every stored block is then fetched again)", url=path)
    return key


def node_key(hot_dir: str | os.PathLike, *, create: bool = True) -> bytes:
    """The key kept for the hot directory ``hot_dir`` (where its control files are), or, while
    those are beside a read-only hot directory, the key that directory holds itself; made
    there if neither exists and ``create``.

    Raises:
        IntegrityError: A key file exists but does not hold a key.
        FileNotFoundError: There is none and ``create`` is False.
    """
    where = control_dir(hot_dir)
    own = os.path.realpath(os.path.expanduser(str(hot_dir)))
    for directory in dict.fromkeys((where, own)):  # a read-only hot directory's own key comes second
        try:
            return local_key(directory, create=False)
        except FileNotFoundError:
            continue
    if not create:
        raise FileNotFoundError(f"no checksum key for the hot directory {own} in {where}")
    return local_key(where)


def _remote_key(url: str, storage_options: dict) -> bytes:
    """The key object under a warm tier on an object store, made if missing (read back, so
    nodes racing to make it end up with the one that landed)."""
    import fsspec

    path = f"{url.rstrip('/')}/{KEY_FILE}"
    fs, _, (where,) = fsspec.get_fs_token_paths(path, storage_options=storage_options)
    if not fs.exists(where):
        with fs.open(where, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
    with fs.open(where, "rb") as handle:
        key = handle.read()
    if len(key) != KEY_BYTES:
        raise IntegrityError(f"checksum key object {path!r} holds {len(key)} bytes, not {KEY_BYTES}", url=path)
    return key


def deployment_key(warm_url: str | None, hot_dir: str, storage_options: dict | None = None) -> bytes:
    """The deployment's key, from where it lives (see the module's docstring), made if missing.

    Args:
        warm_url: The warm tier's URL, or None.
        hot_dir: This node's hot directory (used when there is no warm tier).
        storage_options: fsspec options of a warm tier on an object store.

    Raises:
        IntegrityError: A key file exists but does not hold a key.
        OSError: It cannot be read or made.
    """
    if warm_url is None:
        return node_key(hot_dir)
    try:
        if is_local_url(warm_url):
            return local_key(warm_url.removeprefix("file://"))
        return _remote_key(warm_url, dict(storage_options or {}))
    except OSError as exc:
        # A warm tier that is read-only (or unreachable) and holds no key yet is served read-only
        # (tierload.stores.tier_writes): its blocks then fail their check once and come from cold.
        log.warning("cannot read or make the checksum key in the warm tier %s (%s); using this node's own key "
                    "in %s", warm_url, exc, hot_dir)
        return node_key(hot_dir)


def publish_key(hot_dir: str | os.PathLike, key: bytes) -> None:
    """Keep a copy of ``key`` in ``hot_dir`` (where its control files are; 0600, replaced
    atomically) for this node's consumers."""
    path = os.path.join(control_dir(hot_dir), KEY_FILE)
    try:
        with open(path, "rb") as handle:
            if handle.read() == key:
                return
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(key)
    os.replace(tmp, path)


def adopt_key(warm_url: str | None, hot_dir: str, agree: Callable[[bytes], bytes] | None = None) -> bytes:
    """The deployment's key, with its copy kept in ``hot_dir`` for this node's consumers
    (:func:`publish_key`): what a node cache calls when it starts.

    Args:
        warm_url: The warm tier this node uses, or None.
        hot_dir: The node cache's hot directory (the one holding its endpoint).
        agree: ``agree(offered) -> key``: the coordinator's
            :meth:`~tierload.coordinator.actor.Coordinator.checksum_key`, so that nodes without
            a warm tier share one key too (their peers' frames must check); None: no coordinator,
            the key is :func:`deployment_key`.

    Raises:
        IntegrityError: A key file exists but does not hold a key.
        OSError: It cannot be read or made.
    """
    if agree is None:
        key = deployment_key(warm_url, hot_dir)
    else:
        try:
            offered = node_key(hot_dir, create=False)  # the key this node held before
        except FileNotFoundError:
            offered = deployment_key(warm_url, hot_dir)
        key = agree(offered)
    publish_key(hot_dir, key)
    return key
