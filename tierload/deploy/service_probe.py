"""Is a tierload service running for this configuration? Answered without starting Ray.

Two places tell, both cheap: the endpoint file each node cache publishes in its hot directory
(:mod:`tierload.wire.endpoint`), which names its process and its local channel; and, where a
Ray cluster is configured, whether its address answers at all. ``ray.init`` against nothing
starts a throwaway cluster (or waits for one) and takes seconds; these checks take
milliseconds, so ``tierload status`` with nothing running answers at once.
"""

from __future__ import annotations

import glob
import logging
import os
import socket
from typing import Any

from tierload.config.models import TierloadConfig
from tierload.errors import TierloadError
from tierload.wire.endpoint import read_endpoint
from tierload.wire.messages import Endpoint

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 1.0


def ray_address(config: TierloadConfig, address: str | None = None) -> str | None:
    """The Ray cluster this command should use: ``address`` > ``ray.address`` > ``RAY_ADDRESS``
    (None: no cluster configured; a job then starts its own local Ray)."""
    return address or config.ray.address or os.environ.get("RAY_ADDRESS") or None


def ray_address_file() -> str:
    """Where ``ray start`` records the address of the latest cluster on this machine (as Ray's
    ``ray._common.utils.get_ray_address_file`` computes it, without importing Ray)."""
    temp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(temp, "ray", "ray_current_cluster")


def _host_port(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


def ray_cluster_answers(address: str) -> bool:
    """Whether the Ray cluster at ``address`` (``auto``, ``host:port``; ``ray://`` is not checked)
    accepts a connection now."""
    if address.startswith("ray://"):
        return True  # a Ray Client server: let ray.init say what is wrong with it
    if address == "auto":
        try:
            with open(ray_address_file()) as handle:
                address = handle.read().strip()
        except OSError:
            return False
    target = _host_port(address)
    if target is None:
        return True  # not an address we understand: ray.init will say
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive, though we will not reach its channel
    return True


def local_endpoints(config: TierloadConfig) -> list[Endpoint]:
    """Endpoints of this machine's node caches for ``config`` whose process is alive.

    ``{node}`` in ``hot.dir`` matches any node's directory.
    """
    pattern = os.path.expanduser(config.hot.dir).replace("{node}", "*")
    found = []
    for hot_dir in sorted(glob.glob(pattern)):
        endpoint = read_endpoint(hot_dir)
        if endpoint is not None and _alive(endpoint.pid) and os.path.exists(endpoint.address):
            found.append(endpoint)
    return found


def local_status(endpoint: Endpoint) -> dict[str, Any] | None:
    """What a node cache reports through its local channel (:meth:`NodeCache.status`).

    Returns:
        ``{"node": NodeCache.stats(), "coordinator": Coordinator.stats() or None}``;
        ``{"error": text}`` when the cache accepted the connection but failed to answer; None
        when nothing listens (a cache that ended without withdrawing its endpoint, e.g. with
        the job whose own Ray it ran on).
    """
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    from tierload.wire.node_client import NodeCacheClient

    try:
        Client(endpoint.address, family="AF_UNIX", authkey=endpoint.authkey).close()
    except (OSError, EOFError, AuthenticationError):
        return None  # a stale endpoint: its process is gone (or its pid was reused)
    client = NodeCacheClient(endpoint.address, endpoint.authkey)
    try:
        return dict(client.status())
    except (TierloadError, OSError, EOFError) as exc:
        log.debug("node cache at %s did not answer", endpoint.address, exc_info=True)
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        client.close()

