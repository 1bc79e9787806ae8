"""``tierload status`` as text: a table per node, then the shared warm tier.

Renders the report of :func:`tierload.deploy.service.find_status` (plain data, also ``--json``'s).
"""

from __future__ import annotations

import time
from typing import Any

from tierload.units import format_bytes

TIERS = ("hot", "staged", "peer", "warm", "cold")


def _usage(used: int, capacity: int) -> str:
    share = f" ({used / capacity * 100:.0f}%)" if capacity else ""
    return f"{format_bytes(used)} / {format_bytes(capacity)}{share}"


def _stream_line(stream: dict[str, Any]) -> str:
    done, total = stream.get("cursor") or 0, stream.get("consume_len") or 0
    return (f"    epoch {stream.get('epoch')}  {done:,}/{total:,} positions  lead {stream.get('lead_blocks') or 0} "
            f"blocks ({stream.get('lead_positions') or 0:,} positions)  {stream.get('stream_id')}")


def render_node(node: dict[str, Any]) -> list[str]:
    """One node's table: hot levels, hit ratios, traffic, open streams."""
    if "error" in node:
        return [f"{node['actor']}: unreachable ({node['error']})"]
    lines = [f"node {node['node_id'][:12]}  ({node['actor']})",
             f"  {'tier':<10}{'used / capacity':>32}{'blocks':>9}"]
    for level in node["levels"]:
        lines.append(f"  {level['tier']:<10}{_usage(level['used_bytes'], level['capacity_bytes']):>32}"
                     f"{level['blocks']:>9,}")
    ratio = node["hit_ratio"]
    lines.append(f"  hits      {'  '.join(f'{tier} {ratio.get(tier, 0.0) * 100:.1f}%' for tier in TIERS)}"
                 f"  of {node['accesses']:,} accesses")
    lines.append(f"  traffic   S3 {format_bytes(node['cold_bytes'])} in {node['cold_gets']:,} GETs  "
                 f"warm {format_bytes(node.get('warm_bytes', 0))} read  {node['peer_hits']:,} from peers, "
                 f"{node['peer_served']:,} served  {node['inflight_prefetches']} fetches in flight")
    streams = node.get("streams") or []
    lines.append(f"  streams   {len(streams)} open" + (":" if streams else ""))
    lines.extend(_stream_line(stream) for stream in streams)
    return lines


def render(report: dict[str, Any], *, now: float | None = None) -> str:
    """The whole report: every node, then the warm tier as the coordinator sees it."""
    lines = [f"tierload status at {time.strftime('%H:%M:%S', time.localtime(now))}: "
             f"{len(report['nodes'])} node cache(s)"]
    for node in report["nodes"]:
        lines.append("")
        lines.extend(render_node(node))
    coordinator = report.get("coordinator")
    lines.append("")
    if coordinator and coordinator.get("warm"):
        warm = coordinator["warm"]
        lines.append(f"(shared)  warm {_usage(warm['used_bytes'], warm['capacity_bytes'])}  {warm['blocks']:,} "
                     f"blocks  {len(coordinator.get('nodes') or {})} node(s) known to the coordinator")
    else:
        lines.append("(shared)  warm tier: none" + ("" if coordinator else " reported (no coordinator answered)"))
    return "\n".join(lines)
