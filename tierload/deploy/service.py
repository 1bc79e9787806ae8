"""tierload as a service on a Ray cluster: start, inspect and stop its actors.

``serve`` starts the coordinator and one cache actor on every alive node (named, detached,
pinned); calling it again changes nothing. Jobs that use the same tier configuration find
these actors by name. A node that joins later gets its cache actor when a job first runs
there (or at the next ``serve``).
"""

from __future__ import annotations

import logging
from typing import Any

from tierload.config.models import TierloadConfig
from tierload.deploy.actors import (
    CoordinatorCall,
    actor_call,
    coordinator_name,
    get_coordinator,
    get_node_cache,
    node_cache_name,
)
from tierload.deploy.runtime import ensure_ray, stop_actors
from tierload.node.stats import hit_ratios
from tierload.wire.api import CoordinatorAPI, NodeCacheServiceAPI
from tierload.wire.stats import NodeStats

log = logging.getLogger(__name__)


def _alive_nodes() -> list[str]:
    import ray

    return sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive"))


def _named_actors(config: TierloadConfig) -> list[dict]:
    import ray

    return [a for a in ray.util.list_named_actors(all_namespaces=True)
            if isinstance(a, dict) and a.get("namespace") == config.ray.namespace]


def serve(config: TierloadConfig) -> dict[str, Any]:
    """Start the coordinator and a cache actor on every alive node. Idempotent.

    Returns:
        ``{"nodes": [node ids], "started": [actor names newly started], "coordinator": name}``.

    Raises:
        ServiceError: Ray cannot be reached, or an actor does not start.
    """
    ensure_ray(config)
    before = {a["name"] for a in _named_actors(config)}
    get_coordinator(config)
    nodes = _alive_nodes()
    for node_id in nodes:
        get_node_cache(config, node_id)
    after = {a["name"] for a in _named_actors(config)}
    started = sorted(after - before)
    log.info("tierload serves %d nodes (%d actors started)", len(nodes), len(started))
    return {"nodes": nodes, "started": started, "coordinator": coordinator_name(config)}


def node_row(actor: str, stats: dict[str, Any]) -> dict[str, Any]:
    """One node's line of a status report, from :meth:`NodeCache.stats`.

    Returns:
        ``actor``, ``node_id``, ``levels`` (per hot level: tier, used/capacity bytes, blocks),
        ``hit_ratio`` (fractions per tier), peer, warm and cold traffic (bytes, GETs), in-flight
        prefetches, and ``streams`` (open streams: epoch, cursor, positions, prefetch lead).
    """
    counters = stats["counters"]
    streams = [{name: row.get(name) for name in ("stream_id", "dataset_id", "epoch", "cursor", "consume_len",
                                                  "lead_blocks", "lead_positions", "accesses")}
               for row in stats["streams"]]
    return {
        "actor": actor, "node_id": stats["node_id"], "levels": stats["levels"],
        "hit_ratio": hit_ratios(counters), "peer_hits": counters.get("peer_hits", 0),
        "peer_served": counters.get("peer_served", 0), "warm_bytes": counters.get("warm_bytes", 0),
        "cold_bytes": counters.get("cold_bytes", 0), "cold_gets": counters.get("cold_gets", 0),
        "accesses": counters.get("accesses", 0), "fetch_errors": counters.get("fetch_errors", 0),
        "inflight_prefetches": stats["inflight"], "open_streams": len(stats["streams"]), "streams": streams}


def status(config: TierloadConfig) -> dict[str, Any]:
    """Per node and tier: used/capacity bytes, blocks, hit ratios, peer hits, cold bytes and GETs,
    in-flight prefetches and open streams; and the warm tier as the coordinator sees it. Asks
    the actors through Ray (every node of the cluster).

    Returns:
        ``{"nodes": [node_row(...) or {"actor", "error"}], "coordinator": its stats or None}``.

    Raises:
        ServiceError: Ray cannot be reached.
    """
    import ray

    ensure_ray(config)
    prefix = node_cache_name(config, "")
    nodes: list[dict[str, Any]] = []
    for actor in sorted(_named_actors(config), key=lambda a: a["name"]):
        if not actor["name"].startswith(prefix):
            continue
        try:
            handle = ray.get_actor(actor["name"], namespace=config.ray.namespace)
            stats: NodeStats = ray.get(actor_call(handle, NodeCacheServiceAPI.stats), timeout=30)
        except Exception as exc:  # noqa: BLE001 - report the node as unreachable, keep going
            nodes.append({"actor": actor["name"], "error": f"{type(exc).__name__}: {exc}"})
            continue
        nodes.append(node_row(actor["name"], stats.to_dict()))
    coordinator: dict[str, Any] | None = None
    if any(a["name"] == coordinator_name(config) for a in _named_actors(config)):
        coordinator = CoordinatorCall(coordinator_name(config), config.ray.namespace)(CoordinatorAPI.stats).to_dict()
    return {"nodes": nodes, "coordinator": coordinator}


def local_status(config: TierloadConfig) -> dict[str, Any]:
    """:func:`status` of this machine's node caches, through their local channels (no Ray).

    Finds a cache that a job started on its own local Ray as well as one ``tierload serve``
    started; the warm tier is as the first answering cache's coordinator reports it.

    Returns:
        As :func:`status`; ``{"nodes": [], "coordinator": None}`` when no cache runs here.
    """
    from tierload.deploy.service_probe import local_endpoints
    from tierload.deploy.service_probe import local_status as ask

    nodes: list[dict[str, Any]] = []
    coordinator: dict[str, Any] | None = None
    for endpoint in local_endpoints(config):
        answer = ask(endpoint)
        name = f"cache pid {endpoint.pid} ({endpoint.hot_dirs[-1]})"
        if answer is None:
            continue
        if "error" in answer:
            nodes.append({"actor": name, "error": answer["error"]})
            continue
        nodes.append(node_row(name, answer["node"]))
        coordinator = coordinator or answer.get("coordinator")
    return {"nodes": nodes, "coordinator": coordinator}


def find_status(config: TierloadConfig, address: str | None = None) -> dict[str, Any] | None:
    """The service's status, or None when none runs for ``config`` (decided without starting Ray).

    With a Ray cluster configured (``address``, ``ray.address`` or ``RAY_ADDRESS``) that answers,
    every node's cache through Ray; without one, this machine's caches through their channels.

    Raises:
        ServiceError: The cluster answers but Ray cannot join it.
    """
    from tierload.deploy.service_probe import ray_address, ray_cluster_answers

    cluster = ray_address(config, address)
    if cluster is not None:
        if not ray_cluster_answers(cluster):
            return None
        report = status(config.model_copy(update={"ray": config.ray.model_copy(update={"address": cluster})}))
    else:
        report = local_status(config)
    return report if report["nodes"] or report["coordinator"] else None


def stop(config: TierloadConfig) -> int:
    """Stop this deployment's actors (tier files stay on disk). Returns how many were stopped."""
    ensure_ray(config)
    return stop_actors(config)
