"""Where consumers find their node's cache: a Unix socket path and an endpoint file.

The cache publishes ``{address, authkey, hot_dirs, pid}`` in its hot directory (an owner-only
file), so a consumer whose cache restarted finds the new one without Ray.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import xxhash

ENDPOINT_FILE = ".endpoint.json"


def channel_address(node_id: str, hot_dir: str) -> str:
    """Unix socket path of a node cache (short: socket paths are limited to ~107 bytes)."""
    ident = xxhash.xxh3_64_hexdigest(f"{node_id}\x00{os.path.abspath(os.path.expanduser(hot_dir))}".encode())
    return os.path.join(tempfile.gettempdir(), f"tierload-{ident}.sock")


def publish_endpoint(hot_dir, endpoint: dict[str, Any]) -> None:
    """Write ``endpoint`` (its ``authkey`` as hex) into ``hot_dir``, atomically and owner-only."""
    path = os.path.join(str(hot_dir), ENDPOINT_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump({**endpoint, "authkey": endpoint["authkey"].hex(), "pid": os.getpid()}, handle)
    os.replace(tmp, path)


def read_endpoint(hot_dir) -> dict[str, Any] | None:
    """The endpoint a node cache published in ``hot_dir``, or None."""
    try:
        with open(os.path.join(str(hot_dir), ENDPOINT_FILE)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    data["authkey"] = bytes.fromhex(data["authkey"])
    return data
