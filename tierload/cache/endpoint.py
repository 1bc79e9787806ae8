"""Where consumers find their node's cache: a Unix socket path and an endpoint file.

The cache publishes its :class:`~tierload.cache.messages.Endpoint` in its hot directory (an
owner-only JSON file), so a consumer whose cache restarted finds the new one without Ray.
"""

from __future__ import annotations

import json
import os
import tempfile

import xxhash

from tierload.cache.messages import Endpoint

ENDPOINT_FILE = ".endpoint.json"


def channel_address(node_id: str, hot_dir: str) -> str:
    """Unix socket path of a node cache (short: socket paths are limited to ~107 bytes)."""
    ident = xxhash.xxh3_64_hexdigest(f"{node_id}\x00{os.path.abspath(os.path.expanduser(hot_dir))}".encode())
    return os.path.join(tempfile.gettempdir(), f"tierload-{ident}.sock")


def publish_endpoint(hot_dir, endpoint: Endpoint) -> None:
    """Write ``endpoint`` (its ``authkey`` as hex) into ``hot_dir``, atomically and owner-only."""
    path = os.path.join(str(hot_dir), ENDPOINT_FILE)
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
        with open(os.path.join(str(hot_dir), ENDPOINT_FILE)) as handle:
            return Endpoint.from_json(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def withdraw_endpoint(hot_dir, endpoint: Endpoint) -> None:
    """Remove the endpoint file if it still names ``endpoint`` (a cache closed on purpose).

    A missing endpoint tells keepers (:mod:`tierload.cache.keeper`) that the cache was stopped,
    not lost, so they do not start it again; a successor's file is left alone.
    """
    current = read_endpoint(hot_dir)
    if current is None or (current.address, current.pid) != (endpoint.address, endpoint.pid):
        return
    try:
        os.unlink(os.path.join(str(hot_dir), ENDPOINT_FILE))
    except OSError:  # gone already, or a read-only hot directory: the file names a dead process
        pass
