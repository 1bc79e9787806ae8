"""Is a tierload service running for this configuration? Answered without starting Ray.

Two places tell, both cheap: the endpoint file each node cache publishes in its hot directory
(:mod:`tierload.wire.endpoint`), which names its process and its local channel; and, where a
Ray cluster is configured, whether its address answers at all. ``ray.init`` against nothing
starts a throwaway cluster (or waits for one) and takes seconds; these checks take
milliseconds, so ``tierload status`` with nothing running answers at once.
"""

from __future__ import annotations

import glob
import ipaddress
import logging
import os
import socket
from typing import Any

from tierload.config.models import TierloadConfig
from tierload.errors import ServiceError, TierloadError
from tierload.wire.endpoint import running_endpoint
from tierload.wire.messages import Endpoint

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 1.0


def ray_address(config: TierloadConfig, address: str | None = None) -> str | None:
    """The Ray cluster this command should use: ``address`` > ``ray.address`` > ``RAY_ADDRESS``
    (None: no cluster configured; a job then starts its own local Ray, in its service host)."""
    return address or config.ray.address or os.environ.get("RAY_ADDRESS") or None


def service_address(config: TierloadConfig, address: str | None = None) -> str:
    """The Ray cluster a command that changes the running service joins: ``address`` >
    ``ray.address`` > ``RAY_ADDRESS`` > the Ray cluster that a node cache for ``config`` on this
    machine runs in (a job's own local Ray, or the service's). Decided without starting Ray.

    Raises:
        ServiceError: No cluster is configured and no node cache for ``config`` runs here.
    """
    from tierload.node.ownership import live_owner

    cluster = ray_address(config, address)
    if cluster is not None:
        return cluster
    for endpoint in local_endpoints(config):
        owner = live_owner(endpoint.hot_dirs[-1])
        if owner is not None and owner.ray_address:
            return owner.ray_address
    raise ServiceError(f"no tierload actors run for this configuration (hot.dir {config.hot.dir}) on this machine, "
                       "and no Ray cluster is configured; pass --address of the service's cluster (or set "
                       "ray.address / RAY_ADDRESS), or start it with `tierload serve`")


def ray_address_file() -> str:
    """Where ``ray start`` records the address of the latest cluster on this machine (as Ray's
    ``ray._common.utils.get_ray_address_file`` computes it, without importing Ray)."""
    temp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(temp, "ray", "ray_current_cluster")


def _host_port(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


def _resolved(address: str) -> str | None:
    """``auto`` as the address of this machine's latest cluster (None: none recorded); others unchanged."""
    if address != "auto":
        return address
    try:
        with open(ray_address_file()) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def is_loopback(address: str) -> bool:
    """Whether ``address`` (``auto``, ``host:port``) names a Ray on this machine's loopback interface."""
    resolved = _resolved(address)
    target = _host_port(resolved) if resolved is not None and "://" not in resolved else None
    if target is None:
        return False
    host = target[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ray_cluster_answers(address: str) -> bool:
    """Whether the Ray cluster at ``address`` (``auto``, ``host:port``; ``ray://`` is not checked)
    accepts a connection now (waits at most :data:`CONNECT_TIMEOUT_S` seconds)."""
    if address.startswith("ray://"):
        return True  # a Ray Client server: let ray.init say what is wrong with it
    resolved = _resolved(address)
    if resolved is None:
        return False
    target = _host_port(resolved)
    if target is None:
        return True  # not an address we understand: ray.init will say
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


def local_endpoints(config: TierloadConfig) -> list[Endpoint]:
    """Endpoints of this machine's node caches for ``config`` whose process is alive.

    ``{node}`` in ``hot.dir`` matches any node's directory.
    """
    pattern = os.path.expanduser(config.hot.dir).replace("{node}", "*")
    found = []
    for hot_dir in sorted(glob.glob(pattern)):
        endpoint = running_endpoint(hot_dir)
        if endpoint is not None:
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
        return client.status().to_dict()
    except (TierloadError, OSError, EOFError) as exc:
        log.debug("node cache at %s did not answer", endpoint.address, exc_info=True)
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        client.close()

