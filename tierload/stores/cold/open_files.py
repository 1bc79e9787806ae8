"""Cold requests in flight sized to the process's open-files limit (``RLIMIT_NOFILE``).

Every cold GET in flight holds a socket, and the connection pools keep as many open; under a
low limit (``ulimit -n 256``, some containers' default) ``cold.max_in_flight=256`` alone would
pass it, and the epoch would fail with a bare ``[Errno 24] Too many open files``. So where the
in-flight limit and the pools are sized (:mod:`tierload.stores.cold.async_reads`,
:func:`tierload.stores.cold.location.s3_storage_options`), :func:`in_flight_for_open_files`
lowers the configured number to what the limit leaves (with a warning saying so), or refuses
with a :class:`~tierload.errors.ConfigError` when it leaves nothing.
"""

from __future__ import annotations

import logging
import os

from tierload.errors import ConfigError

log = logging.getLogger(__name__)

# Files kept free for everything but cold sockets: tier files being written and read, the
# channel's connections, Ray's own sockets and pipes opened later, a listing's spill files.
RESERVED_FILES = 64
# Sockets per request in flight: the range GET's connection, and one that the other pool
# (aiobotocore's, for listings, HEADs and GETs obstore does not send) may keep open beside it.
FILES_PER_REQUEST = 2

_sized: dict[tuple[int, int], int] = {}


def open_files_limit() -> int | None:
    """This process's soft ``RLIMIT_NOFILE`` (None where there is none, or no ``resource`` module)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def open_files_now() -> int:
    """Files this process has open now (0 where ``/proc/self/fd`` cannot be read)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def in_flight_for_open_files(requested: int, *, setting: str = "cold.max_in_flight",
                             limit: int | None = None, open_now: int | None = None) -> int:
    """``requested`` cold requests in flight, lowered to what the open-files limit leaves.

    Args:
        requested: The configured number (``cold.max_in_flight``).
        setting: The setting named in the warning and the error.
        limit: The soft open-files limit (default: :func:`open_files_limit`).
        open_now: Files open now (default: :func:`open_files_now`).

    Returns:
        ``requested``, or fewer: ``(limit - open_now - RESERVED_FILES) // FILES_PER_REQUEST``;
        a lowered value is logged as a warning.

    Raises:
        ConfigError: The limit leaves no room for even one request; it names the limit, the
            files open and the setting.
    """
    limit = open_files_limit() if limit is None else limit
    if limit is None:
        return requested
    open_now = open_files_now() if open_now is None else open_now
    room = (limit - open_now - RESERVED_FILES) // FILES_PER_REQUEST
    if room >= requested:
        return requested
    if room < 1:
        raise ConfigError(f"the open-files limit RLIMIT_NOFILE={limit} leaves no room for cold requests "
                          f"({open_now} files are open, {RESERVED_FILES} kept for tier files and channels): raise "
                          f"it (ulimit -n) or lower {setting} (now {requested})")
    log.warning("%s=%d lowered to %d in this process: its open-files limit RLIMIT_NOFILE is %d (%d open, %d "
                "kept for tier files and channels, %d per request); raise the limit (ulimit -n) to keep "
                "more requests in flight", setting, requested, room, limit, open_now, RESERVED_FILES,
                FILES_PER_REQUEST)
    return room


def process_in_flight(requested: int, *, setting: str = "cold.max_in_flight") -> int:
    """:func:`in_flight_for_open_files` decided once per process and ``requested`` (so every
    in-flight limit and pool of the process has one size, and the warning is logged once).

    Raises:
        ConfigError: As :func:`in_flight_for_open_files`.
    """
    key = (os.getpid(), requested)
    sized = _sized.get(key)
    if sized is None:
        sized = _sized[key] = in_flight_for_open_files(requested, setting=setting)
    return sized
