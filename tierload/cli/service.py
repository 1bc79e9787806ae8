"""``tierload serve | status | stop``: the service on a Ray cluster."""

from __future__ import annotations

import json

import click

from tierload.cli.errors import handle_errors
from tierload.units import format_bytes

_address = click.option("--address", default=None, help="Ray address (e.g. auto); default: ray.address / RAY_ADDRESS.")
_config = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                       help="YAML config; jobs must use the same tier settings to find these actors.")


def _load(config_path, address):
    from tierload.config import load_config

    return load_config(config_path, overrides={"ray": {"address": address}} if address else None)


@click.command()
@_address
@_config
def serve(address, config_path) -> None:
    """Start the coordinator and a cache actor on every node (idempotent)."""
    from tierload.service import serve as start_service

    result = handle_errors(lambda: start_service(_load(config_path, address)))()
    click.echo(f"tierload serves {len(result['nodes'])} node(s); "
               + (f"started {len(result['started'])} actor(s)" if result["started"] else "nothing to start: "
                  "already running"))


@click.command()
@_address
@_config
def stop(address, config_path) -> None:
    """Stop the service's actors (hot and warm tier files stay on disk)."""
    from tierload.service import stop as stop_service

    stopped = handle_errors(lambda: stop_service(_load(config_path, address)))()
    click.echo(f"stopped {stopped} actor(s)")


def _render(report: dict) -> str:
    lines = [f"{'node':<14}{'tier':<10}{'used / capacity':>26}{'blocks':>8}  {'hit hot/peer/warm/cold':<24}"
             f"{'peer hits':>10}{'cold bytes':>12}{'GETs':>8}{'in flight':>10}"]
    for node in report["nodes"]:
        if "error" in node:
            lines.append(f"{node['actor']}: unreachable ({node['error']})")
            continue
        ratio = node["hit_ratio"]
        ratios = "/".join(f"{ratio[t] * 100:.0f}%" for t in ("hot", "peer", "warm", "cold"))
        for i, level in enumerate(node["levels"]):
            used = f"{format_bytes(level['used_bytes'])} / {format_bytes(level['capacity_bytes'])}"
            head = node["node_id"][:12] if i == 0 else ""
            tail = (f"{ratios:<24}{node['peer_hits']:>10}{format_bytes(node['cold_bytes']):>12}"
                    f"{node['cold_gets']:>8}{node['inflight_prefetches']:>10}") if i == 0 else ""
            lines.append(f"{head:<14}{level['tier']:<10}{used:>26}{level['blocks']:>8}  {tail}")
    coordinator = report.get("coordinator")
    if coordinator and coordinator.get("warm"):
        warm = coordinator["warm"]
        used = f"{format_bytes(warm['used_bytes'])} / {format_bytes(warm['capacity_bytes'])}"
        lines.append(f"{'(shared)':<14}{'warm':<10}{used:>26}{warm['blocks']:>8}")
    return "\n".join(lines)


@click.command()
@_address
@_config
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(address, config_path, as_json) -> None:
    """Per node and tier: usage, hit ratios, peer hits, cold traffic, in-flight prefetches."""
    from tierload.service import status as service_status

    report = handle_errors(lambda: service_status(_load(config_path, address)))()
    click.echo(json.dumps(report, indent=2, default=str) if as_json else _render(report))
