"""``tierload serve | status | stop``: the service on a Ray cluster."""

from __future__ import annotations

import json
import sys
import time

import click

from tierload.cli.errors import NOT_RUNNING_EXIT_CODE, fail, handle_errors
from tierload.config.loading import load_config
from tierload.errors import ServiceError

_address = click.option("--address", default=None, help="Ray address (e.g. auto); default: ray.address / RAY_ADDRESS.")
_config = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                       help="YAML config; jobs must use the same tier settings to find these actors.")

NO_SERVICE = "no tierload service for this configuration; run a job or `tierload serve`"
# Ray swaps a loopback node IP for the machine's address (and then listens on every interface)
# unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; exported, it keeps the head and every process that
# joins it from that shell on 127.0.0.1 (tests/test_hardness_ray_head.py lists the sockets).
LOOPBACK_HEAD = "ray start --head --node-ip-address 127.0.0.1 --dashboard-host 127.0.0.1"
NO_CLUSTER_HINT = ("start a Ray head on loopback only that outlives this command: in one shell, "
                   f"`export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, `{LOOPBACK_HEAD}`, then "
                   "`tierload serve --address auto`, and run jobs from that shell with ray.address: auto; "
                   "`tierload stop --address auto` ends tierload's actors on it (not `ray stop`, which ends every "
                   "Ray on this machine). Without a cluster, each job starts its own node caches")
# ANSI: cursor home, then clear to the end of the screen: the next frame overwrites the last in place.
REDRAW = "\x1b[H\x1b[J"


def _load(config_path, address):
    return load_config(config_path, overrides={"ray": {"address": address}} if address else None)


def _cluster_or_refuse(config) -> str:
    """The configured Ray cluster's address, or ServiceError when there is none that answers."""
    from tierload.deploy.service_probe import ray_address, ray_cluster_answers

    cluster = ray_address(config)
    if cluster is None:
        raise ServiceError(f"no Ray cluster to serve on: the actors would end with this command; {NO_CLUSTER_HINT}")
    if not ray_cluster_answers(cluster):
        raise ServiceError(f"no Ray cluster answers at {cluster!r}; {NO_CLUSTER_HINT}")
    return cluster


@click.command()
@_address
@_config
def serve(address, config_path) -> None:
    """Start the coordinator and a cache actor on every node of a running Ray cluster (idempotent).

    Without a cluster (no --address, ray.address or RAY_ADDRESS) it refuses and says how to
    start one: actors on a Ray that this command started would end with it.
    """
    from tierload.deploy.service import serve as start_service

    def run():
        config = _load(config_path, address)
        _cluster_or_refuse(config)
        return start_service(config)

    result = handle_errors(run)()
    click.echo(f"tierload serves {len(result['nodes'])} node(s); "
               + (f"started {len(result['started'])} actor(s)" if result["started"] else "nothing to start: "
                  "already running") + "; `tierload status` shows them, `tierload stop` ends them")


@click.command()
@_address
@_config
def stop(address, config_path) -> None:
    """Stop the service's actors (hot and warm tier files stay on disk)."""
    from tierload.deploy.service import stop as stop_service
    from tierload.deploy.service_probe import ray_address, ray_cluster_answers

    config = handle_errors(_load)(config_path, address)
    cluster = ray_address(config)
    if cluster is None:
        click.echo("no tierload service on a Ray cluster for this configuration: nothing to stop (a job's own "
                   "node caches end with the job)")
        return
    if not ray_cluster_answers(cluster):
        # A named cluster that is not there: the service may run elsewhere, so this is no "done".
        fail(ServiceError(f"no Ray cluster answers at {cluster!r}: nothing was stopped; pass the address of the "
                          "cluster the service runs on (`tierload status` finds a local one)"))
    stopped = handle_errors(stop_service)(config)
    click.echo(f"stopped {stopped} actor(s)")


def _not_running(config, address) -> str:
    """Why status found no service: a configured cluster that does not answer is named."""
    from tierload.deploy.service_probe import ray_address, ray_cluster_answers

    cluster = ray_address(config, address)
    if cluster is not None and not ray_cluster_answers(cluster):
        return f"no Ray cluster answers at {cluster!r}: {NO_SERVICE}, or pass the address of a running one"
    return NO_SERVICE


def _watch(find, interval_s: float, as_json: bool) -> None:
    from tierload.cli.status_view import render

    while True:
        report = find()
        frame = NO_SERVICE if report is None else (json.dumps(report, default=str) if as_json else render(report))
        click.echo(REDRAW + frame if sys.stdout.isatty() else frame)
        time.sleep(interval_s)


@click.command()
@_address
@_config
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--watch", is_flag=True, help="Refresh in place every --interval seconds (Ctrl-C ends).")
@click.option("--interval", "interval_s", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds between refreshes with --watch.")
def status(address, config_path, as_json, watch, interval_s) -> None:
    """Per node: hot levels' used/capacity, hit ratios, S3/warm/peer traffic, open streams and their
    prefetch lead; the shared warm tier. Exits 3 when no service runs (decided without starting Ray)."""
    from tierload.cli.status_view import render
    from tierload.deploy.service import find_status

    config = handle_errors(_load)(config_path, address)
    find = handle_errors(lambda: find_status(config, address))
    if watch:
        try:
            _watch(find, interval_s, as_json)
        except KeyboardInterrupt:
            return
    report = find()
    if report is None:
        click.echo(_not_running(config, address), err=True)
        sys.exit(NOT_RUNNING_EXIT_CODE)
    click.echo(json.dumps(report, indent=2, default=str) if as_json else render(report))
