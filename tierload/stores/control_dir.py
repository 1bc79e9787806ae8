"""Where a node cache keeps its control files: in its hot directory, or beside it when that is read-only.

A node cache keeps four small files in its hot directory: the owner lock
(:mod:`tierload.node.ownership`), the endpoint and the channel socket
(:mod:`tierload.wire.endpoint`) and its copy of the checksum key (:mod:`tierload.frames.checksum_key`).
A hot directory that is read-only when the cache starts (a tier filled by an earlier run, on a
mount that is read-only now) cannot take them, and the job must run all the same: the blocks it
holds are served, none is added (:mod:`tierload.node.hot_tier`). Then they go to a private
directory named after the hot directory (0700, in ``/dev/shm`` like the RAM level), and every
process on the node looks there first: once that directory exists it is where the control files
of that hot directory live, until it is removed (a reboot empties ``/dev/shm``). So a hot
directory that turns writable again, or read-only while a cache runs, never splits one cache's
files between two places.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import xxhash

from tierload.stores.dir_trust import make_tier_dir
from tierload.stores.tier_writes import write_refusal

log = logging.getLogger(__name__)


def _real(hot_dir: str | os.PathLike) -> str:
    return os.path.realpath(os.path.expanduser(str(hot_dir)))


def fallback_dir(hot_dir: str | os.PathLike) -> str:
    """The private directory that holds ``hot_dir``'s control files while ``hot_dir`` is read-only."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    ident = xxhash.xxh3_64_hexdigest(_real(hot_dir).encode())
    return os.path.join(base, f"tierload-control-{os.geteuid()}-{ident}")


def control_dir(hot_dir: str | os.PathLike, *, create: bool = False) -> str:
    """The directory that holds the control files of the hot directory ``hot_dir``.

    Args:
        hot_dir: The hot directory (any spelling; resolved with ``realpath``).
        create: The caller is the node cache starting: where ``hot_dir`` refuses new files,
            make the private directory (:func:`fallback_dir`) and use it.

    Returns:
        :func:`fallback_dir` if it exists (or was just made), else ``hot_dir`` resolved.

    Raises:
        UntrustedDirError: The private directory exists but another user owns it or others
            may write it.
        OSError: It cannot be made.
    """
    real, fallback = _real(hot_dir), fallback_dir(hot_dir)
    if os.path.isdir(fallback):
        make_tier_dir(Path(fallback), tier="hot", shared=False)  # checked on every use: it holds the key
        return fallback
    if not create or not os.path.isdir(real):
        return real
    refusal = write_refusal(real)
    if refusal is None:
        return real
    make_tier_dir(Path(fallback), tier="hot", shared=False)
    log.info("the hot directory %s refuses new files (%s); the node cache keeps its lock, endpoint and checksum "
             "key in %s", real, refusal.strerror, fallback)
    return fallback
