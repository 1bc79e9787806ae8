"""A mixture in the simulator (issue 22, item 1): ``tierload policy simulate --mix`` replays the mixed
order, both trace engines agree on it, and the live node cache records exactly that trace: one
stream of the mixture's block indices, planned with one hot budget (hot hits never above MIN).

The live test uses real moto S3 over HTTP, a real file:// source, a real local Ray and real tier dirs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import put_indexed_objects
from torch.utils.data import DataLoader

from tierload.cli.main import cli
from tierload.simulator.fast.tracegen import fast_job_trace
from tierload.simulator.trace import DatasetShape, JobSpec, job_trace

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")


@pytest.mark.parametrize("world_size, drop_last", [(1, False), (3, False), (3, True)])
def test_both_trace_engines_give_the_mixed_order(world_size, drop_last):
    parts = [DatasetShape.uniform(50, 100, name="a"), DatasetShape.uniform(12, 300, samples_per_block=4, name="b"),
             DatasetShape.uniform(7, 50, name="c")]
    shape = DatasetShape.mixed(parts, (1, 1, 2), epoch_samples=101)
    job = JobSpec(shape, epochs=3, seed=5, world_size=world_size, drop_last=drop_last)
    slow, fast = job_trace(job), fast_job_trace(job)
    assert np.array_equal(slow.block, fast.block) and np.array_equal(slow.node, fast.node)
    assert shape.num_blocks == 69 and set(np.unique(fast.block).tolist()) <= set(range(69))
    if not drop_last:  # every block is read (drop_last leaves out each epoch's last positions)
        assert set(np.unique(fast.block).tolist()) == set(range(69))


def test_policy_simulate_takes_a_mixture():
    result = CliRunner().invoke(cli, ["policy", "simulate", CONFIG, "--mix", "300=0.7", "--mix", "100=0.3",
                                      "--epochs", "2", "--hot-capacity", "25%", "--warm-capacity", "0", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    shape = DatasetShape.mixed([DatasetShape.uniform(300, name="300"), DatasetShape.uniform(100, name="100")],
                               (0.7, 0.3))
    assert data["setup"]["accesses"] == len(fast_job_trace(JobSpec(shape, epochs=2)))
    rows = {row["hot_policy"]: row for row in data["rows"]}
    assert rows["clairvoyant"]["hot_hit_ratio"] == pytest.approx(data["min"]["hot_hit_ratio"])
    bad = CliRunner().invoke(cli, ["policy", "simulate", CONFIG, "--mix", "300"])
    assert bad.exit_code != 0 and "DATASET=WEIGHT" in bad.output


def test_the_node_cache_plans_the_mixture_as_one_stream(bucket, s3, tier_config, tmp_path, ray_session):
    from tierload.deploy.runtime import stop_actors
    from tierload.frames.blockfile import HEADER_SIZE
    from tierload.loader.dataset import TieredDataset
    from tierload.loader.mixture_sources import Source
    from tierload_tools.bench.belady import dataset_min_hit_ratios

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/big", 60, size=1000)
    local = tmp_path / "small"
    for index in range(30):
        (local / "0").mkdir(parents=True, exist_ok=True)
        (local / "0" / f"obj-{index:06d}.bin").write_bytes(f"{index:08d}".encode() + bytes(992))
    hot = 22 * (1000 + HEADER_SIZE)  # a quarter of the 90 blocks
    config = tier_config(hot=hot, warm=None, prefetch={"depth_blocks": 2}, policy={"hot": {"eviction": "clairvoyant"}})
    dataset = TieredDataset([Source(f"s3://{name}/big", 0.7, "files", storage_options=s3.storage_options),
                             Source(f"file://{local}", 0.3, "files")], config, batch_size=6, seed=4)
    try:
        manifest = dataset.manifest
        dataset._link.call(lambda cache: cache.record_trace(True))
        epochs, hot_hits, accesses = 3, [], []
        for epoch in range(epochs):
            dataset.set_epoch(epoch)
            assert sum(len(batch) for batch in DataLoader(dataset, batch_size=6, collate_fn=list)) == 90
            stats = dataset.epoch_stats(epoch)
            hot_hits.append(stats["hot_hits"])
            accesses.append(stats["accesses"])
        recorded = dataset._link.call(lambda cache: cache.record_trace(False))
        index = {block.key: i for i, block in enumerate(manifest.blocks)}
        live = np.array([index[key] for key, _, _ in recorded])
        parts = [DatasetShape(part.sample_block.astype(np.int64), np.array([b.length for b in part.blocks]), str(i))
                 for i, part in enumerate(dataset._sources.parts)]
        simulated = fast_job_trace(JobSpec(DatasetShape.mixed(parts, (0.7, 0.3)), epochs=epochs, seed=4))
        assert np.array_equal(live, simulated.block)  # the live stream is the mixed order, access for access
        # MIN is optimal over the whole trace (an epoch alone may see a hit MIN takes in the next one)
        reference = dataset_min_hit_ratios(dataset, epochs, hot)
        assert reference.exact  # objects of one size: MIN is the optimum, so it bounds the hot hits
        min_hits = sum(ratio * count for ratio, count in zip(reference.ratios, accesses, strict=True))
        assert sum(hot_hits) <= min_hits + 1e-6, (hot_hits, min_hits)
        assert hot_hits[-1] > 0  # one budget across both sources: the planner keeps blocks for their reuse
    finally:
        stop_actors(dataset.config)
