"""Tier directories are private unless shared on purpose.

Whoever can write a tier directory (or rename it, through a parent they can write) can swap
a block for bytes of their own, and read the node cache's endpoint file. So a tier directory
tierload creates is made owner-only (0700, missing parents too), and one that exists already
is refused when another user owns it, or group or others may write it or one of its parents
(a parent writable by all with the sticky bit, like ``/tmp``, is fine: nobody can rename
what is not theirs there). The same rule as OpenSSH's ``StrictModes`` for ``~/.ssh``.

A directory shared on purpose (a team's warm tier on a group-writable mount) is accepted
when the config says so: ``hot.shared: true`` or ``warm.shared: true``.

Everything tierload creates in or for a tier (the tier directory and its missing parents, its
sub-directories, blocks, temporary files, lock, endpoint, socket and key copy) is made here or
with the modes given here: directories 0700 and files 0600, or the process's umask where the
tier is shared on purpose. They are set when the path is created, never afterwards, so no
other user can open one in between.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from tierload.errors import UntrustedDirError

__all__ = ["PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "dir_mode", "file_mode", "make_private_dirs", "make_tier_dir",
           "open_new_file"]

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def dir_mode(shared: bool) -> int:
    """The mode to create a tier's directory with: 0700, or 0777 (less the umask) if ``shared``."""
    return 0o777 if shared else PRIVATE_DIR_MODE


def file_mode(shared: bool) -> int:
    """The mode to create a tier's file with: 0600, or 0666 (less the umask) if ``shared``."""
    return 0o666 if shared else PRIVATE_FILE_MODE


def make_private_dirs(path: str | os.PathLike, *, shared: bool = False) -> None:
    """Create the directory ``path`` and each missing parent with :func:`dir_mode` (existing ones untouched).

    Args:
        path: The directory.
        shared: The tier is shared on purpose (the process's umask decides the modes).

    Raises:
        OSError: A directory cannot be created (a parent is a file, read-only, no permission).
    """
    path = Path(path)
    missing = [part for part in (path, *path.parents) if not part.exists()]
    for part in reversed(missing):
        try:
            part.mkdir(mode=dir_mode(shared))
        except FileExistsError:
            pass  # made meanwhile by another process


def open_new_file(path: str | os.PathLike, *, shared: bool = False, exclusive: bool = False) -> BinaryIO:
    """Open ``path`` for writing (binary, truncated), created with :func:`file_mode` if missing.

    Args:
        path: The file, in a tier directory.
        shared: The tier is shared on purpose.
        exclusive: Fail if it exists (``O_EXCL``).

    Raises:
        FileExistsError: ``exclusive`` and it exists.
        OSError: It cannot be created or opened.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_EXCL if exclusive else 0)
    descriptor = os.open(path, flags, file_mode(shared))
    try:
        return os.fdopen(descriptor, "wb")
    except BaseException:
        os.close(descriptor)
        raise


def make_tier_dir(path: Path, *, tier: str, shared: bool) -> None:
    """Create the tier directory ``path`` (owner-only) if missing, and check it can be trusted.

    Args:
        path: The directory, already resolved (``realpath``).
        tier: The tier's name (``"hot-disk"``, ``"hot-ram"``, ``"warm"``); its first word names
            the config section whose ``shared`` key accepts a shared directory.
        shared: The directory is shared on purpose: create it with the process's umask, check nothing.

    Raises:
        UntrustedDirError: Another user owns ``path`` or a parent, or group/others may write it.
        OSError: The directory cannot be created.
    """
    make_private_dirs(path, shared=shared)  # one made meanwhile by another process is checked below
    if shared:
        return
    me = os.geteuid()
    _check(path, tier, me, leaf=True)
    for parent in path.parents:
        _check(parent, tier, me, leaf=False)


def _check(path: Path, tier: str, me: int, *, leaf: bool) -> None:
    info = path.stat()
    owner_ok = info.st_uid == me or (not leaf and info.st_uid == 0)
    writable = info.st_mode & _WRITABLE_BY_OTHERS
    sticky = info.st_mode & stat.S_ISVTX
    if owner_ok and not (writable and (leaf or not sticky)):
        return
    what = "tier directory" if leaf else "a parent of the tier directory"
    why = (f"owned by {_user(info.st_uid)}, not by this process's user {_user(me)}" if not owner_ok
           else f"writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})")
    section = tier.split("-", 1)[0]
    raise UntrustedDirError(
        f"the {tier} {what} {str(path)!r} is {why}: another user could replace the blocks it serves. Use a "
        f"directory of your own (mode 0700; tierload creates one if it is missing), or set {section}.shared: true "
        f"if it is shared on purpose", tier=section, url=str(path))


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
