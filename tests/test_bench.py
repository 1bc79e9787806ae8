"""The benchmark harness's parts: Belady's MIN, the emulated S3, the report.

The whole harness runs in CI as ``tierload bench --quick`` (.ci/run); these tests check the
parts it measures with, quickly, through counters rather than timings where they can.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tierload.simulator.belady import min_hit_flags
from tierload.simulator.oracle import next_use
from tierload_tools.bench.belady import min_hit_ratios
from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
from tierload_tools.bench.workload import Workload


def _brute_force_min(trace: list[int], capacity: int) -> int:
    """Most hits any cache of ``capacity`` unit blocks gets on ``trace`` (exhaustive search)."""
    best = 0
    stack: list[tuple[int, frozenset[int], int]] = [(0, frozenset(), 0)]
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


def _optimum_by_search(trace: list[int], sizes: list[int], capacity: int) -> int:
    """The most hits any cache of ``capacity`` bytes gets on ``trace``, by trying every choice of
    which accesses' blocks to keep until their next use (tiny traces only)."""
    import itertools

    spans = [(t, trace.index(block, t + 1)) for t, block in enumerate(trace) if block in trace[t + 1:]]
    best = 0
    for keep in itertools.product((False, True), repeat=len(spans)):
        held = [span for span, kept in zip(spans, keep, strict=True) if kept]
        if all(sum(sizes[trace[t]] for t, end in held if t <= gap < end) <= capacity for gap in range(len(trace))):
            best = max(best, len(held))
    return best


def test_min_of_blocks_of_different_sizes_is_a_reference_a_policy_can_beat():
    """Belady's rule keeps the block needed soonest; with sizes, two small blocks may be worth more
    than one large one. Hence the report's MIN* mark: the quick run's trace (70 JPEG blocks of
    133-393 KB) gets 17 hits by the rule in epoch 2 and 19 at the optimum (an ILP), and the live
    hot tier got 18 in some runs (benchmarks/results/2026-12-03-min-reference)."""
    from tierload.simulator.belady import min_is_exact

    trace, sizes, capacity = [0, 1, 2, 0, 1, 2], [10, 5, 5], 10
    rule = min_hit_ratios([np.asarray(trace)], np.asarray(sizes), capacity)[0] * len(trace)
    assert round(rule) == 1 and not min_is_exact(np.asarray(trace), np.asarray(sizes))
    assert _optimum_by_search(trace, sizes, capacity) == 2  # keep blocks 1 and 2 instead of 0
    equal = [5, 5, 5]  # one size: the rule is the optimum
    assert round(min_hit_ratios([np.asarray(trace)], np.asarray(equal), capacity)[0] * len(trace)) == \
        _optimum_by_search(trace, equal, capacity) == 2 and min_is_exact(np.asarray(trace), np.asarray(equal))


def test_the_median_of_repeats_keeps_a_flag_only_where_every_run_has_it():
    from tierload_tools.bench.run import _median_epochs

    runs = [{"epochs": [{"epoch": 0, "samples_per_s": rate, "min_exact": exact}]}
            for rate, exact in ((10.0, False), (30.0, False), (20.0, True))]
    assert _median_epochs(runs) == [{"epoch": 0, "samples_per_s": 20.0, "min_exact": False}]
    assert _median_epochs(runs[2:]) == [{"epoch": 0, "samples_per_s": 20.0, "min_exact": True}]


def test_min_counts_the_accesses_the_hot_hit_counter_counts():
    """A packed dataset (20 samples per block): MIN is over one access per run of a block, the
    simulator's trace of the same job, not one per sample (which made consecutive samples of a
    block count as hits: ~95% MIN in a cold first epoch while the hot tier hit 0%)."""
    from tierload.data.order import epoch_order, rank_slice
    from tierload.simulator.trace import DatasetShape, JobSpec, job_trace
    from tierload_tools.bench.belady import access_trace

    shape = DatasetShape.uniform(30, 1000, samples_per_block=20)
    job = JobSpec(shape, epochs=2, seed=3)
    orders = [rank_slice(epoch_order(shape.sample_block, seed=3, epoch=epoch, shuffle=shape.shuffle_mode("auto"),
                                     window_blocks=job.window_blocks), rank=0, world_size=1, drop_last=False)
              for epoch in range(3)]
    trace = access_trace(shape.sample_block, orders, shape.reuse_gap(job.window_blocks))
    simulated = job_trace(job)
    assert np.array_equal(np.concatenate(trace), simulated.block)
    assert [len(epoch) for epoch in trace] == [30, 30]  # one access per block and epoch, not 600
    capacity = 10 * 1000
    ratios = min_hit_ratios(trace, shape.block_bytes, capacity)
    hits = min_hit_flags(simulated.block, shape.block_bytes, capacity)
    assert ratios == [float(hits[:30].mean()), float(hits[30:].mean())]
    assert ratios[0] == 0.0  # a cold first epoch: every access is a compulsory miss
    per_sample = min_hit_ratios([shape.sample_block[order] for order in orders[:2]], shape.block_bytes, capacity)
    assert per_sample[0] > 0.9  # what the old definition reported


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


def test_emulated_s3_timeline_has_the_gets_and_bytes_of_a_window(shaped):
    from tierload_tools.bench.link_timeline import epoch_link, read_timeline

    s3, proxy = shaped
    fs = _fs(s3, proxy.endpoint_url)
    fs.cat_file("bench-proxy/a/object")  # connect first
    time.sleep(0.2)
    start = time.time()
    fs.cat_file("bench-proxy/a/object")
    seconds = time.time() - start
    timeline = read_timeline(proxy.endpoint_url, start, start + seconds + 1.0)  # not the first GET, 0.2 s before
    assert sum(timeline["bytes"]) == 400_000 and sum(timeline["gets"]) == 1
    link = epoch_link(timeline, start, seconds)
    # the body leaves after the 50 ms latency, paced at 2 MB/s: ~0.2 s of bytes, one bin of resolution
    assert 0.0 <= link["first_get_s"] <= link["first_byte_s"] < link["last_byte_s"] <= seconds + 0.001  # ms rounding
    assert link["last_byte_s"] - link["first_byte_s"] >= 0.15
    assert sum(link["mb_s"]) == pytest.approx(0.4 / min(1.0, seconds), abs=0.11)


def test_epoch_link_places_bytes_in_the_epoch_seconds():
    from tierload_tools.bench.link_timeline import BIN_S, epoch_link

    start = 1000.0
    bins = int(round(3.0 / BIN_S))
    sent, gets = [0] * bins, [0] * bins
    gets[int(round(0.5 / BIN_S))] = 1                 # first GET at 0.5 s
    for second in (1, 2):                             # 1 MB in each of seconds 1 and 2 (0.5 MB in 2.5-3.0)
        for i in range(int(round(second / BIN_S)), int(round((second + 1) / BIN_S))):
            sent[i] = 50_000
    link = epoch_link({"bin_s": BIN_S, "start": start, "bytes": sent, "gets": gets}, start, 2.5)
    assert link["first_get_s"] == pytest.approx(0.5)
    assert link["first_byte_s"] == pytest.approx(1.0)
    assert link["last_byte_s"] == pytest.approx(2.5)  # clipped at the epoch's end
    assert link["mb_s"] == [0.0, 1.0, 1.0]  # the last half second at its own rate


def test_report_table_and_targets():
    from tierload_tools.bench import report

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
    assert "on the same accesses" in text and "hot hit <= MIN" in text  # one definition for both
    assert "40.0%*" not in text  # MIN of blocks of one size (no "min_exact": False) is the optimum: no mark
    for row in result["contenders"]["tierload"]["epochs"]:
        row["min_exact"] = False  # blocks of different sizes: Belady's rule is a reference, marked
    text = report.table(result)
    assert "40.0%*" in text and "MIN*: blocks of different sizes" in text


def test_report_splits_epoch_1_at_the_first_get():
    from tierload_tools.bench import report

    link = {"first_get_s": 2.0, "first_byte_s": 2.05, "last_byte_s": 9.0, "mb_s": [0.0, 0.0, 15.0] + [16.0] * 7}
    row = {"epoch": 0, "samples": 600, "seconds": 10.0, "samples_per_s": 60.0, "s3_bytes": 111_200_000, "link": link}
    result = {"probe": {"link_bound_samples_s": 100.0},
              "contenders": {"tierload": {"status": "ok", "epochs": [row]}, "s3fs": {"status": "not run"},
                             # read into RAM before the epoch: the timeline's first bin (straddling the
                             # start) holds its last bytes, with or without the GETs that asked for them
                             "ram": {"status": "ok", "epochs": [{**row, "seconds": 0.5, "s3_gets": 0, "link": {
                                 "first_get_s": 0.0, "first_byte_s": 0.0, "last_byte_s": 0.0, "mb_s": [0.1]}}]},
                             "preloaded": {"status": "ok", "epochs": [{**row, "seconds": 0.5, "link": {
                                 "first_get_s": None, "first_byte_s": 0.0, "last_byte_s": 0.009, "mb_s": [0.1]}}]}}}
    lines = report.link_lines(result)
    assert lines[4] == "  ram              0.5 s: no GET during epoch 1 (its data was read before it)"
    assert lines[5] == "  preloaded        0.5 s: no GET during epoch 1 (its data was read before it)"
    assert "first GET at 2.00 s, bytes from 2.05 to 9.00 s (16.0 MB/s then), 1.00 s after the last byte" in lines[1]
    # 60 of 100 samples/s as measured; 600 samples in the 8 s from the first GET: 0.75
    assert "0.600 as measured; 0.750 counting from its first GET" in lines[2]
    assert lines[3].endswith("0 0 15 16 16 16 16 16 16 16")


# ------------------------------------------------------------------ the emulated S3's own buckets
@pytest.fixture(scope="module")
def own_buckets(s3, tmp_path_factory):
    """The proxy serving a stored bucket (varied sizes, a zero-byte object) and a synthetic one."""
    from tierload_tools.bench.own_buckets import write_stored_bucket

    bodies = {f"data/{i % 3}/{i:03d}.bin": bytes([i]) * (i * 37) for i in range(12)}
    directory = write_stored_bucket(tmp_path_factory.mktemp("stored"), bodies.items())
    buckets = {"stored": f"stored:{directory}", "synthetic": "synthetic:2345:100:7:train"}
    with EmulatedS3(s3.endpoint_url, LinkSettings(latency_ms=0, connection_mb_s=0, total_mb_s=0), buckets) as proxy:
        yield s3, proxy, bodies


def _client(s3, endpoint_url):
    import botocore.session

    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint_url, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s")


def test_own_bucket_get_head_range_and_missing(own_buckets):
    import hashlib

    from botocore.exceptions import ClientError

    s3, proxy, bodies = own_buckets
    client = _client(s3, proxy.endpoint_url)
    key, body = "data/2/005.bin", bodies["data/2/005.bin"]
    got = client.get_object(Bucket="stored", Key=key)
    assert got["Body"].read() == body and got["ContentLength"] == len(body)
    assert got["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert client.head_object(Bucket="stored", Key=key)["ContentLength"] == len(body)
    part = client.get_object(Bucket="stored", Key=key, Range="bytes=10-19")
    assert part["Body"].read() == body[10:20] and part["ContentRange"] == f"bytes 10-19/{len(body)}"
    assert client.get_object(Bucket="stored", Key=key, Range="bytes=-7")["Body"].read() == body[-7:]
    assert client.get_object(Bucket="stored", Key="data/0/000.bin")["Body"].read() == b""  # zero bytes
    for call, code in ((lambda: client.get_object(Bucket="stored", Key="data/nope"), "NoSuchKey"),
                       (lambda: client.head_object(Bucket="stored", Key="data/nope"), "404"),
                       (lambda: client.get_object(Bucket="stored", Key=key, IfMatch='"0"'), "PreconditionFailed"),
                       (lambda: client.get_object(Bucket="stored", Key=key, Range="bytes=9999-"), "InvalidRange")):
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["Error"]["Code"] == code
    assert client.get_object(Bucket="stored", Key=key, IfMatch=got["ETag"])["Body"].read() == body


def test_own_bucket_lists_like_s3(own_buckets):
    s3, proxy, bodies = own_buckets
    client = _client(s3, proxy.endpoint_url)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="stored", Prefix="data/", PaginationConfig={
        "PageSize": 5})
    listed = [(o["Key"], o["Size"]) for page in pages for o in page.get("Contents", [])]
    assert listed == sorted((key, len(body)) for key, body in bodies.items())
    folders = client.list_objects_v2(Bucket="stored", Prefix="data/", Delimiter="/")
    assert [p["Prefix"] for p in folders["CommonPrefixes"]] == ["data/0/", "data/1/", "data/2/"]
    after = client.list_objects_v2(Bucket="stored", StartAfter="data/1/")
    assert after["Contents"][0]["Key"] == "data/1/001.bin"
    fs = _fs(s3, proxy.endpoint_url)
    synthetic = fs.find("synthetic/train", detail=True)
    assert len(synthetic) == 2345 and list(synthetic) == sorted(synthetic)
    first = next(iter(synthetic))
    assert len(fs.cat_file(first)) == 100 and synthetic[first]["ETag"] == fs.info(first)["ETag"]
    counters = proxy.counters()
    assert counters["list_requests"] >= 3 + 3 and counters["get_requests"] >= 1


def test_rig_ceiling_probe_gets_every_object(own_buckets):
    from tierload_tools.bench.probe import measure_unsigned

    s3, proxy, bodies = own_buckets
    result = measure_unsigned(proxy.endpoint_url, "stored", sorted(bodies), concurrency=4, seconds=60)
    assert result.objects == len(bodies) and result.bytes == sum(len(b) for b in bodies.values())



# ------------------------------------------------------- the other loaders' contenders (issue 16)
@pytest.fixture(scope="module")
def tiny_bench(s3, tmp_path_factory):
    """48 JPEGs of ~8 KiB on moto behind an unshaped emulated S3, as ``tierload bench`` sets them up."""
    from tierload_tools.bench.workload import generate, upload

    workload = Workload(samples=48, sample_kib=8, epochs=2, batch_size=16, num_workers=1, step_ms=0)
    jpegs, labels = generate(workload, tmp_path_factory.mktemp("images"), processes=1)
    dataset = upload(s3.create_bucket("bench-peers"), jpegs, labels, bucket="bench-peers")
    with EmulatedS3(s3.endpoint_url, LinkSettings(latency_ms=0, connection_mb_s=0, total_mb_s=0)) as proxy:
        yield workload, dataset, proxy


@pytest.mark.parametrize(("name", "package"), [("s3torch", "s3torchconnector"), ("raydata", "ray.data")])
def test_other_loader_reads_every_sample_through_the_emulated_s3(tiny_bench, tmp_path, name, package):
    """The contender, run by the harness in its own process, delivers every sample once per epoch and
    reads every byte from the emulated S3 each epoch (neither keeps a cache)."""
    import sys

    from tierload_tools.bench.contenders import CONTENDERS, Context
    from tierload_tools.bench.run import run_phase
    from tierload_tools.s3local import CREDENTIALS

    pytest.importorskip(package, reason=f"{package} is not installed (the bench extra)")
    workload, dataset, proxy = tiny_bench
    ctx = Context(name, workload, dataset, proxy.endpoint_url, dict(CREDENTIALS), str(tmp_path / "work"),
                  str(tmp_path / "convert"))
    result = run_phase(sys.executable, CONTENDERS[name], "run", ctx, tmp_path / "logs", timeout_s=240)
    assert result["ok"], (result.get("error"), open(result["log"]).read()[-3000:])
    assert [row["samples"] for row in result["epochs"]] == [len(dataset.keys)] * workload.epochs
    assert [row["s3_gets"] for row in result["epochs"]] == [len(dataset.keys)] * workload.epochs
    assert [row["s3_bytes"] for row in result["epochs"]] == [dataset.total_bytes] * workload.epochs


def test_contender_without_its_package_is_not_run():
    from tierload_tools.bench.contenders import ContenderInfo
    from tierload_tools.bench.run import _python_for

    info = ContenderInfo("x", "tierload_tools.bench.contenders.ram", "main", "needs a module", requires="no_such_module_16")
    python, reason = _python_for(info, None)
    assert python is None and "no_such_module_16" in reason


def test_report_standings_against_each_contender():
    from tierload_tools.bench import report

    def entry(rates):
        return {"status": "ok", "epochs": [{"epoch": e, "samples_per_s": r} for e, r in enumerate(rates)]}

    result = {"contenders": {"tierload": entry([30.0, 60.0, 90.0]), "s3torch": entry([20.0, 25.0, 35.0]),
                             "raydata": {"status": "not run", "reason": "ray.data does not import"}}}
    assert report.standings(result) == [{"against": "s3torch", "epoch1_ratio": 1.5, "later_ratio": 2.5}]
