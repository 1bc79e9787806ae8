"""Metrics: the catalog, the sinks (real prometheus_client), the Grafana dashboard, and a real
local Ray exporting a TieredDataset epoch against moto on its Prometheus endpoint."""

from __future__ import annotations

import json
import os
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import put_indexed_objects
from torch.utils.data import DataLoader

import tierload
from tierload.metrics.catalog import METRICS, exported_names
from tierload.metrics.samples import LeadClock, sample
from tierload.metrics.sinks import PrometheusSink

DASHBOARD = Path(__file__).resolve().parent.parent / "docker" / "grafana-dashboard.json"
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                 "offset", "le", "inf", "nan"}


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, labels, durations and numbers left out)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)                       # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)                      # range durations
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[match.end():].lstrip().startswith("("):
            continue  # a function
        if match.group().lower() not in _PROMQL_WORDS:
            names.add(match.group())
    return names


def test_dashboard_queries_name_only_exported_metrics_and_show_every_metric():
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names("ray_")
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(exprs) >= 20
    shown = set()
    for expr in exprs:
        names = _metric_names(expr)
        assert names, f"query names no metric: {expr}"
        assert names <= exported, f"{expr} names {sorted(names - exported)}, not exported by tierload"
        shown |= names
    for spec in METRICS:
        assert any(name.startswith(f"ray_{spec.name}") for name in shown), f"{spec.name} is on no panel"


def test_the_query_parser_catches_a_misspelt_metric():
    assert _metric_names("sum by (tier) (rate(ray_tierload_hitz_total[1m])) / 2") == {"ray_tierload_hitz_total"}


def _scrape(registry) -> dict[tuple[str, tuple], float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    values = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def test_prometheus_sink_turns_totals_into_increments_and_zeroes_gone_gauges():
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    sink = PrometheusSink(registry)
    sink.push([sample("tierload_accesses", 5, node="n1"),
               sample("tierload_prefetch_lead_blocks", 7, node="n1", stream="a"),
               sample("tierload_fetch_latency_seconds", 0.02, node="n1", source="cold"),
               sample("tierload_fetch_latency_seconds", 3.0, node="n1", source="cold")], source="node:n1")
    sink.push([sample("tierload_accesses", 8, node="n1")], source="node:n1")  # stream "a" closed
    sink.push([sample("tierload_prefetch_lead_blocks", 4, node="n2", stream="b")], source="node:n2")
    values = _scrape(registry)
    assert values[("tierload_accesses_total", (("node", "n1"),))] == 8  # 5, then 3 more
    assert values[("tierload_prefetch_lead_blocks", (("node", "n1"), ("stream", "a")))] == 0
    assert values[("tierload_prefetch_lead_blocks", (("node", "n2"), ("stream", "b")))] == 4  # another source's
    assert values[("tierload_fetch_latency_seconds_count", (("node", "n1"), ("source", "cold")))] == 2
    assert values[("tierload_fetch_latency_seconds_bucket", (("le", "0.025"), ("node", "n1"),
                                                             ("source", "cold")))] == 1
    assert {name for name, _ in values} >= {"tierload_accesses_total", "tierload_prefetch_lead_blocks"}
    assert {name for name, _ in values} <= exported_names("") | {"tierload_accesses_created",
                                                                 "tierload_fetch_latency_seconds_created"}
    # a counter whose total went down (its owner restarted) counts from zero again
    sink.push([sample("tierload_accesses", 2, node="n1")], source="node:n1")
    assert _scrape(registry)[("tierload_accesses_total", (("node", "n1"),))] == 10


def test_lead_clock_measures_seconds_ahead_from_the_consumption_rate():
    clock = LeadClock()
    assert math.isnan(clock.leads([("s", 10, 30)], now=100.0)[0][2])  # rate not known yet
    assert clock.leads([("s", 20, 40)], now=102.0) == [("s", 20, 4.0)]  # 10 runs in 2 s: 20 runs = 4 s
    assert clock.leads([("s", 20, 40)], now=103.0) == [("s", 20, 4.0)]  # not moving: the figure stands
    assert math.isnan(clock.leads([("s", 0, 16)], now=104.0)[0][2])  # a new epoch of the same lineage


def _ray_metrics_port() -> int:
    import ray

    ports = [node["MetricsExportPort"] for node in ray.nodes() if node["Alive"]]
    assert ports, "the local Ray reports no metrics export port"
    return int(ports[0])


def _scrape_ray(port: int) -> list[tuple[str, dict, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith("ray_tierload_")]


def test_a_real_ray_exports_an_epochs_metrics(bucket, tier_config, make_dataset, monkeypatch):
    """One epoch through 2 DataLoader workers: Ray's Prometheus endpoint carries the node cache's
    counters (equal to its stats), the fetch-latency histogram, tier usage and the rank's stall."""
    monkeypatch.setenv("TIERLOAD_METRICS__ENABLED", "true")  # the tests' default is off (tests/conftest.py)
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/m", 40, size=4096, classes=2)
    config = tier_config(warm=None, metrics={"export_interval_s": 0.5})
    dataset = make_dataset(f"s3://{name}/m", config, layout="files", batch_size=8)
    loader = tierload.watch(DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=tierload.collate))
    assert sum(len(labels) for _, labels in loader) == 40
    counters = dataset.cache_stats()["counters"]
    assert counters["accesses"] == 40 and counters["cold_gets"] >= 40
    dataset_id = dataset.manifest.dataset_id
    port = _ray_metrics_port()
    wanted = {"ray_tierload_accesses_total": counters["accesses"], "ray_tierload_s3_gets_total": counters["cold_gets"],
              "ray_tierload_s3_bytes_total": counters["cold_bytes"]}
    deadline, found = time.monotonic() + 90, {}
    while time.monotonic() < deadline:
        series = _scrape_ray(port)
        found = {name: value for name, labels, value in series if wanted.get(name) == value}
        stall = [value for name, labels, value in series
                 if name == "ray_tierload_stall_seconds_total" and labels.get("dataset") == dataset_id]
        latency = [value for name, labels, value in series
                   if name == "ray_tierload_fetch_latency_seconds_count" and labels.get("source") == "cold"]
        used = [value for name, labels, value in series
                if name == "ray_tierload_used_bytes" and labels.get("tier") == "hot-disk" and value > 0]
        if len(found) == len(wanted) and stall and latency and used:
            break
        time.sleep(1)
    else:
        pytest.fail(f"Ray's endpoint on port {port} did not carry the epoch's metrics within 90 s: found {found}, "
                    f"stall {stall}, cold fetch latency {latency}, hot-disk used {used}")
    assert stall[0] == pytest.approx(dataset.stall_stats()["total"]["stall_s"])
    assert max(latency) >= 40


def test_a_process_that_exported_before_ray_init_exports_to_ray_after_it():
    """The process's sink is made again as Ray's once the process connects to Ray: a sink made
    before ``ray.init`` (prometheus_client's) used to stay, so a driver's per-rank stall metrics
    never reached Ray's endpoint (seen when another test had exported first in the same process)."""
    script = """
import ray
from tierload.config.loading import load_config
from tierload.deploy.runtime import ensure_ray
from tierload.metrics.sinks import RaySink, default_sink
before = default_sink()
ensure_ray(load_config({"ray": {"num_cpus": 1, "object_store_memory_bytes": 80 * 2**20}}))  # as a job starts it
after = default_sink()
print(type(before).__name__, type(after).__name__, isinstance(after, RaySink), after is default_sink())
ray.shutdown()
"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    env["RAY_TMPDIR"] = ray_tmp = tempfile.mkdtemp(prefix="tlr")  # short: Ray's socket paths stay under 107 bytes
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    before, after, is_ray, stable = done.stdout.split()[-4:]
    assert before != "RaySink" and after == "RaySink" and is_ray == "True" and stable == "True"
