"""The benchmark harness's parts: Belady's MIN, the emulated S3, the report.

The whole harness runs in CI as ``tierload bench --quick`` (.ci/run); these tests check the
parts it measures with, quickly, through counters rather than timings where they can.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tierload.bench.belady import min_hit_ratios
from tierload.bench.emulated_s3 import EmulatedS3, LinkSettings
from tierload.bench.workload import Workload
from tierload.simulator.belady import min_hit_flags
from tierload.simulator.oracle import next_use


def _brute_force_min(trace: list[int], capacity: int) -> int:
    """Most hits any cache of ``capacity`` unit blocks gets on ``trace`` (exhaustive search)."""
    best = 0
    stack = [(0, frozenset(), 0)]
    while stack:
        i, cache, hits = stack.pop()
        if i == len(trace):
            best = max(best, hits)
            continue
        block = trace[i]
        if block in cache:
            stack.append((i + 1, cache, hits + 1))
            continue
        stack.append((i + 1, cache, hits))  # bypass
        if len(cache) < capacity:
            stack.append((i + 1, cache | {block}, hits))
        else:
            for victim in cache:
                stack.append((i + 1, (cache - {victim}) | {block}, hits))
    return best


def test_next_use():
    assert next_use(np.array([1, 2, 1, 1, 3]), None).tolist()[:3] == [2, np.iinfo(np.int64).max, 3]


@pytest.mark.parametrize("seed", range(12))
def test_min_matches_exhaustive_search_for_equal_sizes(seed):
    rng = np.random.default_rng(seed)
    trace = rng.integers(0, 5, size=11).tolist()
    capacity = int(rng.integers(1, 4))
    hits = min_hit_flags(np.array(trace), np.ones(5, dtype=np.int64), capacity)
    assert int(hits.sum()) == _brute_force_min(trace, capacity)


def test_min_hit_ratios_per_epoch():
    order = np.arange(8)
    # epoch 1 is all compulsory misses; with room for half the blocks MIN hits half of epoch 2
    ratios = min_hit_ratios([order, order[::-1]], np.ones(8, dtype=np.int64), 4)
    assert ratios == [0.0, 0.5]


def test_workload_validates():
    with pytest.raises(ValueError, match="hot_fraction"):
        Workload(hot_fraction=0)
    assert Workload.quick().samples < Workload().samples


@pytest.fixture(scope="module")
def shaped(s3):
    fs = s3.create_bucket("bench-proxy")
    fs.pipe_file("bench-proxy/a/object", b"x" * 400_000)
    with EmulatedS3(s3.endpoint_url, LinkSettings(latency_ms=50, connection_mb_s=2, total_mb_s=0)) as proxy:
        yield s3, proxy


def _fs(s3, endpoint_url):
    import s3fs

    options = dict(s3.storage_options)
    options["client_kwargs"] = {**options["client_kwargs"], "endpoint_url": endpoint_url}
    return s3fs.S3FileSystem(skip_instance_cache=True, **options)


def test_emulated_s3_counts_gets_and_bytes(shaped):
    s3, proxy = shaped
    before = proxy.counters()
    fs = _fs(s3, proxy.endpoint_url)
    assert fs.cat_file("bench-proxy/a/object") == b"x" * 400_000
    after = proxy.counters()
    assert after["get_requests"] - before.get("get_requests", 0) == 1
    assert after["get_bytes"] - before.get("get_bytes", 0) == 400_000


def test_emulated_s3_waits_latency_and_paces_bandwidth(shaped):
    s3, proxy = shaped
    fs = _fs(s3, proxy.endpoint_url)
    fs.cat_file("bench-proxy/a/object")  # connect first
    started = time.perf_counter()
    fs.cat_file("bench-proxy/a/object")
    elapsed = time.perf_counter() - started
    # 50 ms to first byte + 400 kB at 2 MB/s (less the 10 ms burst) = ~0.24 s
    assert 0.2 < elapsed < 1.5


def test_report_table_and_targets():
    from tierload.bench import report

    epoch = {"samples": 10, "seconds": 1.0, "stall_s": 0.1, "stall_fraction": 0.1, "s3_gets": 10, "byte_hit_ratio": 0}
    result = {
        "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 24, "gpu": "none", "python": "3.11", "torch": "2.13"},
        "workload": Workload().to_dict(), "repeats": 1,
        "link": {**LinkSettings().__dict__, "description": LinkSettings().describe()},
        "probe": {"server_raw_mb_s": 80.0, "emulated_link_mb_s": 16.0, "cap_mb_s": 16.0, "link_bound_mb_s": 16.0,
                  "link_bound_samples_s": 60.0},
        "dataset": {"samples": 10, "bytes": 1000, "mean_sample_bytes": 100, "hot_capacity_bytes": 250},
        "contenders": {
            "s3fs": {"status": "ok", "setup_s": 0.1, "peak_rss_bytes": 1e8, "conversion": None, "epochs": [
                {**epoch, "epoch": e, "samples_per_s": 20.0, "s3_bytes": 1000} for e in range(2)]},
            "tierload": {"status": "ok", "setup_s": 5, "peak_rss_bytes": 2e8, "conversion": None, "epochs": [
                {**epoch, "epoch": e, "samples_per_s": 50.0 if e == 0 else 40.0, "s3_bytes": 1000 if e == 0 else 700,
                 "hot_hit_ratio": 0.3, "min_hit_ratio": 0.4} for e in range(2)]},
            "litdata": {"status": "not run", "reason": "no peers' environment"},
        },
    }
    checks = {c["target"]: c for c in report.targets(result)}
    assert checks["tierload epoch 1 samples/s / link bound"]["value"] == pytest.approx(50 / 60)
    assert checks["tierload (warm off) epochs 2+ S3 bytes / dataset bytes"]["met"] is True
    assert checks["tierload (warm off) epochs 2+ samples/s / best peer"]["value"] == pytest.approx(2.0)
    result["targets"] = list(checks.values())
    text = report.table(result)
    assert any(line.startswith("litdata") and "not run: no peers' environment" in line for line in text.splitlines())
    assert "MIN" in text and "40.0%" in text
