"""Where consumers find their node's cache: a Unix socket and an endpoint file, both in the
cache's (private) hot directory (or where its control files are while it is read-only:
:mod:`tierload.stores.control_dir`).

The cache publishes its :class:`~tierload.wire.messages.Endpoint` in its hot directory (an
owner-only JSON file), so a consumer whose cache restarted finds the new one without Ray.
The socket lives beside it, so only the directory's owner can reach it; where that path is
longer than a socket path may be, it is a name in Linux's abstract namespace instead (no file;
the channel's key and handshake deadline still guard it). A cache closed cleanly removes both;
one that crashed leaves them, and the next cache on the directory clears them
(:func:`clear_stale_endpoint`).
"""

from __future__ import annotations

import json
import logging
import os
import stat

import xxhash

from tierload.stores.control_dir import control_dir
from tierload.stores.local import pid_alive
from tierload.wire.messages import Endpoint

log = logging.getLogger(__name__)

ENDPOINT_FILE = ".endpoint.json"
SOCKET_FILE = ".tierload-channel.sock"
# Linux's sockaddr_un.sun_path holds 108 bytes, the terminating NUL included (unix(7)).
_SUN_PATH_MAX = 107


def channel_address(node_id: str, hot_dir: str) -> str:
    """The node cache's socket: :data:`SOCKET_FILE` in ``hot_dir``, or an abstract-namespace name
    (starting with NUL) when that path is longer than :data:`_SUN_PATH_MAX` bytes."""
    directory = control_dir(hot_dir)
    path = os.path.join(directory, SOCKET_FILE)
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return path
    return "\0tierload-" + xxhash.xxh3_64_hexdigest(f"{node_id}\x00{directory}".encode())


def clear_stale_endpoint(hot_dir) -> Endpoint | None:
    """Remove what a crashed cache left in ``hot_dir``: its endpoint file and its socket.

    Only when the process the endpoint names is gone; a live owner's files are left alone.

    Returns:
        The stale endpoint that was cleared, or None.
    """
    endpoint = read_endpoint(hot_dir)
    if endpoint is None or pid_alive(endpoint.pid):
        return None
    if not endpoint.address.startswith("\0"):
        try:
            if stat.S_ISSOCK(os.lstat(endpoint.address).st_mode):
                os.unlink(endpoint.address)
        except FileNotFoundError:
            pass
    try:
        os.unlink(os.path.join(control_dir(hot_dir), ENDPOINT_FILE))
    except FileNotFoundError:
        pass
    log.info("cleared the endpoint and socket %r of a node cache that is gone (pid %d)", endpoint.address,
             endpoint.pid)
    return endpoint


def publish_endpoint(hot_dir, endpoint: Endpoint) -> None:
    """Write ``endpoint`` (its ``authkey`` as hex) into ``hot_dir``, atomically and owner-only."""
    path = os.path.join(control_dir(hot_dir), ENDPOINT_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(endpoint.to_json(), handle)
    os.replace(tmp, path)


def read_endpoint(hot_dir) -> Endpoint | None:
    """The endpoint a node cache published in ``hot_dir``, or None (no file, or not an endpoint).

    Raises:
        MessageError: Another tierload release published it.
    """
    try:
        with open(os.path.join(control_dir(hot_dir), ENDPOINT_FILE)) as handle:
            return Endpoint.from_json(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_endpoint(hot_dir) -> Endpoint | None:
    """The endpoint of the node cache that runs for ``hot_dir`` now (published there, its process
    alive), or None. The one way to find a running cache on this node; whether it answers is the
    next call's to say.

    Raises:
        MessageError: Another tierload release published it.
    """
    endpoint = read_endpoint(hot_dir)
    return endpoint if endpoint is not None and pid_alive(endpoint.pid) else None


def withdraw_endpoint(hot_dir, endpoint: Endpoint) -> None:
    """Remove the endpoint file if it still names ``endpoint`` (a cache closed on purpose).

    A missing endpoint tells keepers (:mod:`tierload.deploy.keeper`) that the cache was stopped,
    not lost, so they do not start it again; a successor's file is left alone.
    """
    current = read_endpoint(hot_dir)
    if current is None or (current.address, current.pid) != (endpoint.address, endpoint.pid):
        return
    try:
        os.unlink(os.path.join(control_dir(hot_dir), ENDPOINT_FILE))
    except OSError:  # gone already, or a read-only hot directory: the file names a dead process
        pass
