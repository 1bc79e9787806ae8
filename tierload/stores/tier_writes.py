"""Whether a tier (or one level of the hot tier) takes writes, and how its failures are told.

A tier directory can turn read-only, lose its permissions or fill up while a job runs. Then the
tier stops admitting (it still serves what it holds; the next tier takes the rest), says why
once, and tries one write again every ``write_retry_s`` so that a tier that is writable again
is used again. A full file system is told apart (:func:`is_full`): the hot tier lowers the
level's capacity to what it holds instead of pausing it.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from typing import Callable

from tierload.errors import BackendError
from tierload.stores.base import BlockStore
from tierload.stores.registry import open_store

log = logging.getLogger(__name__)

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def os_error_of(exc: BaseException) -> OSError | None:
    """The :class:`OSError` behind ``exc`` (itself or a cause in its ``raise ... from`` chain), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:  # BackendError is an OSError with none
            return seen
        seen = seen.__cause__
    return None


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the file system is full (ENOSPC, or a quota: EDQUOT)."""
    cause = os_error_of(exc)
    return cause is not None and cause.errno in _FULL_ERRNOS


def describe(exc: BaseException) -> str:
    """``exc``'s cause in a few words, e.g. ``"Read-only file system (EROFS)"``."""
    cause = os_error_of(exc)
    if cause is None or cause.errno is None:
        return type(exc).__name__
    return f"{os.strerror(cause.errno)} ({errno.errorcode.get(cause.errno, cause.errno)})"


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes an unprivileged writer may still use on the file system of ``path``, or None."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def write_refusal(path: str | os.PathLike) -> OSError | None:
    """Why the directory ``path`` refuses new files (read-only file system, no permission), or None.

    Asked of the kernel (``access(2)``, which answers EROFS for a read-only mount even to root),
    without writing anything.
    """
    if os.access(path, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError as exc:
        return exc
    code = errno.EROFS if read_only else errno.EACCES
    return OSError(code, os.strerror(code), str(path))


def warn_if_larger_than_file_system(tier: str, path: str | os.PathLike, capacity_bytes: int) -> bool:
    """Warn when ``capacity_bytes`` exceeds the size of the file system that holds ``path``.

    Such a tier fills its file system before its capacity; blocks that do not fit then go to
    the next tier (or level), and the capacity is lowered to what fits when that happens.

    Returns:
        Whether the warning was given.
    """
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    size = stats.f_blocks * stats.f_frsize
    if capacity_bytes <= size:
        return False
    log.warning("the %s tier's capacity (%d bytes) exceeds the size of its file system at %s (%d bytes); blocks "
                "that do not fit there go to the next tier", tier, capacity_bytes, path, size)
    return True


def open_warm_or_none(url: str | None, *, shared: bool = False) -> BlockStore | None:
    """The warm tier's store, or None when there is none or it cannot be opened (e.g. a directory
    that does not exist under a read-only parent): the job runs without a warm tier, warned once.

    A directory that exists but is read-only opens (its blocks are served, none is added).
    ``shared``: the directory is shared on purpose (``warm.shared``; see ``open_store``).

    Raises:
        UntrustedDirError: Another user owns the directory, or group/others may write it (and
            ``shared`` is False): a configuration error, never hidden by running without warm.
    """
    if not url:
        return None
    try:
        return open_store(url, "warm", shared=shared)
    except BackendError as exc:
        log.warning("the warm tier at %s cannot be opened (%s); running without a warm tier", url, exc)
        return None


class WriteHealth:
    """One tier's writability: paused after a refused write, tried again after ``retry_s``.

    The first refusal of a run is logged once as a warning with its cause (no traceback: the
    cause is the file system, not tierload); refusals while the tier is known to refuse are
    counted only; the first write that succeeds again is logged once. Not thread-safe: the
    owner calls it under its lock.

    Args:
        tier: The tier's name, for the messages (e.g. ``"hot-disk"``, ``"warm"``).
        retry_s: Seconds between a refused write and the next try.
        clock: Monotonic seconds (tests may pass their own).
    """

    def __init__(self, tier: str, retry_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.tier = tier
        self.retry_s = retry_s
        self.clock = clock
        self.failures = 0
        self.refusing = False
        self._paused_until = float("-inf")

    def admitting(self) -> bool:
        """Whether a write may be tried now: the tier takes writes, or its retry time came."""
        return self.clock() >= self._paused_until

    def trying(self) -> None:
        """A write is about to be tried: while the tier refuses, this one probes it and the next
        may try only ``retry_s`` later (unless this one succeeds)."""
        if self.refusing:
            self._paused_until = self.clock() + self.retry_s

    def failed(self, exc: BaseException) -> None:
        """A write was refused: admit nothing for ``retry_s``; log the cause if it is news."""
        self.failures += 1
        self._paused_until = self.clock() + self.retry_s
        if self.refusing:
            log.debug("the %s tier still refuses writes: %s", self.tier, exc)
            return
        self.refusing = True
        log.warning("the %s tier refuses writes (%s: %s); it serves the blocks it holds, admits nothing, and "
                    "tries one write again every %g s", self.tier, describe(exc), exc, self.retry_s)

    def refused_at_start(self, exc: OSError) -> None:
        """The tier's directory refuses writes before any was tried (read-only at start): admit
        nothing for ``retry_s``; the owner says so once, with what the tier holds."""
        self.refusing = True
        self._paused_until = self.clock() + self.retry_s
        log.debug("the %s tier refuses writes at start: %s", self.tier, exc)

    def succeeded(self) -> None:
        """A write went through: admit again (logged once after a run of refusals)."""
        self._paused_until = float("-inf")
        if self.refusing:
            self.refusing = False
            log.warning("the %s tier takes writes again (after %d refused)", self.tier, self.failures)

    def stats(self) -> dict:
        """``writable`` (as far as known) and ``write_failures`` so far."""
        return {"writable": not self.refusing, "write_failures": self.failures}
