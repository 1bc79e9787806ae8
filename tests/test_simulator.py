"""The trace simulator: traces are exactly what a job plans, replays count exactly, and the
orderings the policy docs promise hold (as properties of the algorithms, on small traces)."""

from __future__ import annotations

import numpy as np
import pytest

from tierload.config.loading import load_config
from tierload.data.order import epoch_order, rank_slice, worker_positions
from tierload.errors import ConfigError
from tierload.node.stream import Stream
from tierload.simulator.belady import min_hits
from tierload.simulator.report import compare, format_table, to_json
from tierload.simulator.stack import StackSpec
from tierload.simulator.run import simulate
from tierload.simulator.trace import DatasetShape, JobSpec, Trace, job_trace, rank_epoch_runs
from tierload.simulator.tracefile import read_trace, write_trace

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

MiB = 2**20


def stack(hot, hot_bytes, warm=None, warm_bytes=0, **fields):
    return StackSpec(hot_policy=hot, hot_capacity_bytes=hot_bytes, warm_policy=warm, warm_capacity_bytes=warm_bytes,
                     **fields)


# ------------------------------------------------------------------ traces
def test_generated_trace_is_what_the_node_cache_stream_counts():
    # Row-group blocks (12 samples each) under block-aware shuffle: runs group samples, and a
    # run may straddle the epoch boundary. Build the stream exactly as TieredDataset plans it.
    shape = DatasetShape.uniform(50, samples_per_block=12)
    job = JobSpec(shape, epochs=3, seed=5, world_size=2)
    gap = shape.reuse_gap(job.window_blocks)
    for epoch in range(3):
        for rank in range(2):
            def order(e):
                full = epoch_order(shape.sample_block, seed=5, epoch=e, shuffle="block", window_blocks=8)
                return rank_slice(full, rank=rank, world_size=2, drop_last=False)
            mine = order(epoch)
            seq = np.concatenate([shape.sample_block[mine], shape.sample_block[order(epoch + 1)]])
            stream = Stream("s", "d", epoch, seq, len(mine), num_consumers=3, num_blocks=50, reuse_gap=gap)
            run_block, _, consume_len = rank_epoch_runs(job, epoch, rank)
            assert consume_len == len(mine)
            assert np.array_equal(run_block, stream.run_block[:stream.consume_runs])


def test_workers_consume_the_rank_order_so_they_do_not_change_the_trace():
    # DataLoader takes one batch from each worker in turn; rebuilt from worker_positions, that
    # is the rank's order, position for position.
    count, workers, batch = 103, 3, 8
    per_worker = [worker_positions(count, worker_id=w, num_workers=workers, chunk=batch) for w in range(workers)]
    consumed = []
    for step in range(-(-count // batch)):
        part = per_worker[step % workers]
        offset = (step // workers) * batch
        consumed.extend(part[offset:offset + batch].tolist())
    assert consumed == list(range(count))


def test_ranks_fill_nodes_and_jobs_get_their_own():
    shape = DatasetShape.uniform(40)
    trace = job_trace([JobSpec(shape, epochs=2, world_size=4, nodes=2), JobSpec(shape, epochs=1, seed=9, start=0.5)])
    assert trace.num_nodes == 3 and trace.num_jobs == 2
    per_node = np.bincount(trace.node)
    assert per_node.tolist() == [40, 40, 40]  # 2 ranks x 10 samples x 2 epochs; 40 x 1 epoch
    first = trace.block[trace.job == 0]
    assert sorted(first[:40].tolist()) == list(range(40))  # epoch 0 of job 0 reads every block once
    second = np.flatnonzero(trace.job == 1)
    assert second[0] > 0 and trace.epoch[second].max() == 0.0  # starts half an epoch later


def test_jobs_on_one_dataset_share_blocks_and_different_datasets_do_not():
    x, y = DatasetShape.uniform(10, name="x"), DatasetShape.uniform(20, name="y")
    shared = job_trace([JobSpec(x, epochs=1), JobSpec(x, epochs=1, seed=1)])
    apart = job_trace([JobSpec(x, epochs=1), JobSpec(y, epochs=1)])
    assert shared.num_blocks == 10 and apart.num_blocks == 30
    assert set(apart.block[apart.job == 1].tolist()) == set(range(10, 30))
    with pytest.raises(ConfigError, match="named"):
        job_trace([JobSpec(x), JobSpec(DatasetShape.uniform(11, name="x"))])


@pytest.mark.parametrize("suffix", [".txt", ".parquet"])
def test_trace_files_round_trip(tmp_path, suffix):
    shape = DatasetShape.uniform(30, 1000, size_spread=0.5, seed=2)
    trace = job_trace(JobSpec(shape, epochs=2, world_size=2))
    write_trace(trace, tmp_path / f"t{suffix}")
    again = read_trace(tmp_path / f"t{suffix}")
    spec = stack("lru", 8000, "lfu", 16000)
    assert simulate(again, spec).to_dict() | {"seconds": 0, "cpu_seconds": 0, "accesses_per_s": 0} == \
        simulate(trace, spec).to_dict() | {"seconds": 0, "cpu_seconds": 0, "accesses_per_s": 0}


def test_text_trace_defaults_and_errors_name_the_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("# a comment\na\nb 10\n\na 3 1 2\n")
    trace = read_trace(path, block_bytes=7)
    assert trace.keys == ("a", "b") and trace.block.tolist() == [0, 1, 0]
    assert trace.block_bytes.tolist() == [3, 10] and trace.node.tolist() == [0, 0, 1]
    assert trace.epoch.tolist() == [0.0, 0.0, 2.0]
    path.write_text("a 3\nb x\n")
    with pytest.raises(ConfigError, match=r"t.txt:2: .*whole numbers"):
        read_trace(path)
    path.write_text("a 3\nb 4\na 5\n")
    with pytest.raises(ConfigError, match=r"t.txt:3: key 'a' has size 5, but 3"):
        read_trace(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_trace(tmp_path / "missing.txt")


def test_dataset_shape_from_a_manifest(tmp_path):
    from tierload.data.blocks import Block
    from tierload.data.manifest import Manifest

    blocks = [Block.of(f"s3://b/{i}.parquet", "etag", 4, 100 + i) for i in range(3)]
    manifest = Manifest("s3://b", "parquet", blocks, np.array([0, 0, 1, 2, 2, 2], np.int32),
                        np.array([0, 1, 0, 0, 1, 2], np.int32), np.full(6, -1, np.int64))
    (tmp_path / "m.json").write_text(manifest.to_json())
    shape = DatasetShape.from_manifest(tmp_path / "m.json")
    assert shape.block_bytes.tolist() == [100, 101, 102] and shape.sample_block.tolist() == [0, 0, 1, 2, 2, 2]
    assert shape.shuffle_mode("auto") == "block"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a tierload manifest"):
        DatasetShape.from_manifest(tmp_path / "bad.json")


# ------------------------------------------------------------------ exact counts
def test_a_hand_checked_replay_through_hot_warm_and_cold():
    # a b a c a; hot LRU holds 1 block, warm LRU 2.
    #   a: cold; into hot; into warm.          b: cold; a demoted (already warm); b into warm.
    #   a: warm hit; b demoted (warm has it).  c: cold; a demoted (warm has it); c into warm,
    #                                             evicting b (read longer ago than a).
    #   a: warm hit; c demoted (warm has it).
    trace = Trace.from_blocks([0, 1, 0, 2, 0], 10)
    result = simulate(trace, stack("lru", 10, "lru", 20))
    assert (result.hot_hits, result.warm_hits, result.cold_misses) == (0, 2, 3)
    assert (result.hot_promotions, result.hot_demotions) == (5, 4)
    assert (result.warm_promotions, result.warm_demotions) == (3, 1)
    assert (result.cold_bytes, result.cold_gets) == (30, 3)


def test_large_blocks_cost_one_get_per_request_size():
    trace = Trace.from_blocks([0, 1, 0], [10, 3])
    result = simulate(trace, stack("keep", 0, max_request_bytes=4))
    assert result.cold_misses == 3 and result.cold_gets == 3 + 1 + 3 and result.cold_bytes == 23


def test_every_access_is_served_by_exactly_one_tier():
    trace = job_trace(JobSpec(DatasetShape.uniform(300, 100, size_spread=1.0), epochs=3, world_size=2))
    for hot in ("clairvoyant", "keep", "lfu", "lfu-size", "lru"):
        for warm in (None, "lfu", "lru"):
            result = simulate(trace, stack(hot, 6000, warm, 12000))
            assert result.hot_hits + result.warm_hits + result.cold_misses == len(trace)
            assert result.cold_gets == result.cold_misses  # small blocks: one GET each
            assert result.hot_promotions >= result.hot_demotions


def test_progress_reaches_the_total():
    trace = job_trace(JobSpec(DatasetShape.uniform(200), epochs=2))
    seen = []
    compare(trace, stack("clairvoyant", 50 * MiB, "lfu", 100 * MiB), hot_policies=("clairvoyant", "lru"),
            warm_policies=("lfu",), progress=lambda done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == 3 * len(trace)  # MIN + 2 replays
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)


# ------------------------------------------------------------------ the documented orderings
def test_one_job_clairvoyant_reaches_min_and_lru_falls_below_keep():
    trace = job_trace(JobSpec(DatasetShape.uniform(2000, MiB), epochs=4))
    comparison = compare(trace, stack("clairvoyant", 500 * MiB, "lfu", 1000 * MiB))
    ceiling = comparison.ceiling
    assert ceiling.exact
    assert comparison.row("clairvoyant").hot_hits == ceiling.hits
    assert comparison.row("lru").hot_hit_ratio < comparison.row("keep").hot_hit_ratio
    assert all(row.hot_hits <= ceiling.hits for row in comparison.rows)


def test_ranks_on_several_nodes_clairvoyant_beats_keep():
    # Each node reads a different random quarter of every epoch; knowing which, clairvoyant
    # keeps the blocks its node will read next epoch.
    trace = job_trace(JobSpec(DatasetShape.uniform(2000, MiB), epochs=4, world_size=4))
    comparison = compare(trace, stack("clairvoyant", 500 * MiB), hot_policies=("clairvoyant", "keep", "lru"))
    assert comparison.row("clairvoyant").hot_hits == comparison.ceiling.hits
    assert comparison.row("clairvoyant").hot_hit_ratio > comparison.row("keep").hot_hit_ratio + 0.05


@pytest.mark.parametrize("stagger", [0.0, 2.0])
def test_two_jobs_sharing_warm_frequency_reads_less_from_cold_than_lru(stagger):
    shape = DatasetShape.uniform(2000, MiB)
    trace = job_trace([JobSpec(shape, epochs=4, seed=0), JobSpec(shape, epochs=4, seed=1, start=stagger)])
    comparison = compare(trace, stack("clairvoyant", 500 * MiB, "lfu", 1000 * MiB), hot_policies=("clairvoyant",))
    assert comparison.row("clairvoyant", "lfu").cold_bytes < comparison.row("clairvoyant", "lru").cold_bytes


def test_a_one_pass_scan_does_not_push_the_training_set_out_of_warm():
    train, scan = DatasetShape.uniform(2000, MiB, name="train"), DatasetShape.uniform(2000, MiB, name="eval")
    trace = job_trace([JobSpec(train, epochs=4), JobSpec(scan, epochs=1, seed=3)])
    comparison = compare(trace, stack("clairvoyant", 250 * MiB, "lfu", 1000 * MiB), hot_policies=("clairvoyant",))
    lfu, lru, keep = (comparison.row("clairvoyant", w).cold_bytes for w in ("lfu", "lru", "keep"))
    assert lfu < keep < lru


def test_lfu_size_reads_fewer_gets_on_mixed_sizes():
    trace = job_trace(JobSpec(DatasetShape.uniform(2000, MiB, size_spread=1.0), epochs=6))
    comparison = compare(trace, stack("lfu", 500 * MiB), hot_policies=("lfu", "lfu-size"))
    assert comparison.row("lfu-size").cold_gets < comparison.row("lfu").cold_gets
    assert not comparison.ceiling.exact


def test_min_per_node_is_the_sum_of_each_nodes_min():
    trace = job_trace(JobSpec(DatasetShape.uniform(400), epochs=3, world_size=2))
    both = min_hits(trace.block, trace.block_bytes, 100 * MiB, trace.node)
    each = sum(min_hits(trace.block[trace.node == n], trace.block_bytes, 100 * MiB).hits for n in (0, 1))
    assert both.hits == each


def test_report_table_and_json():
    trace = job_trace(JobSpec(DatasetShape.uniform(400), epochs=2))
    spec = StackSpec.from_config(load_config(), hot_capacity_bytes=100 * MiB, warm_capacity_bytes=200 * MiB)
    comparison = compare(trace, spec)
    data = to_json(comparison)
    assert data["rows"][0]["configured"] and data["rows"][0]["hot_policy"] == "clairvoyant"
    assert len(data["rows"]) == 5 + 3 and data["min"]["exact"]
    table = format_table(comparison)
    assert "* clairvoyant  lfu" in table and "Belady's MIN" in table
    with pytest.raises(ConfigError, match="unknown hot-tier policy"):
        compare(trace, spec, hot_policies=("mru",))
