"""The live system and the simulator agree (issue 3): a real epoch loop (local Ray, moto S3)
records its access trace; replaying it through the simulator with the same policies gives the
same hit ratio per tier, within a stated tolerance.

Why not exactly: (1) the live hot tier cannot evict the blocks pinned by the prefetch window
(at most ``prefetch.depth_blocks`` = 2 here), the simulator has no window; (2) the live warm
tier admits a block a moment after its cold read (the node's next sync, <= 0.2 s), the
simulator at once; (3) the live clairvoyant policy sees the current and the next epoch's
order, the simulator the whole trace. With 90 blocks each percentage point is ~2.7 accesses.
"""

from __future__ import annotations

import pytest
from helpers import index_of, land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.simulator.stack import StackSpec
from tierload.simulator.run import simulate
from tierload.simulator.tracefile import (
    read_trace,
    write_trace,  # noqa: F401 - the format the file below follows
)

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

TOLERANCE = 0.05  # absolute, per tier


@pytest.mark.parametrize("hot_policy, warm_policy", [("lru", "lfu"), ("clairvoyant", "lfu"), ("keep", "keep")])
def test_live_hit_ratios_match_the_simulator_on_the_recorded_trace(bucket, tier_config, make_dataset, tmp_path,
                                                                   hot_policy, warm_policy):
    name, fs = bucket
    blocks, size, stored = 90, 1000, 1040
    put_indexed_objects(fs, f"{name}/ds", blocks, size=size)
    hot_bytes, warm_bytes = 20 * stored, 40 * stored
    config = tier_config(hot=hot_bytes, warm=warm_bytes, prefetch={"depth_blocks": 2},
                         policy={"hot": {"eviction": hot_policy}, "warm": {"eviction": warm_policy}})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", batch_size=6)
    dataset._link.call(lambda cache: cache.record_trace(True))
    live = {"accesses": 0, "hot_hits": 0, "warm_hits": 0, "cold_misses": 0}
    epochs = 4
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=6, collate_fn=lambda batch: batch)
        assert sorted(index_of(s) for batch in loader for s, _ in batch) == list(range(blocks))
        land_warm_writes(dataset)  # the epoch boundary: warm admissions land
        stats = dataset.epoch_stats(epoch)
        for counter in live:
            live[counter] += stats[counter]
    recorded = dataset._link.call(lambda cache: cache.record_trace(False))
    assert len(recorded) == live["accesses"] == epochs * blocks
    path = tmp_path / "trace.txt"
    path.write_text("".join(f"{key} {nbytes} 0 {epoch}\n" for key, nbytes, epoch in recorded))
    trace = read_trace(path)
    spec = StackSpec.from_config(config, hot_capacity_bytes=hot_bytes, warm_capacity_bytes=warm_bytes)
    sim = simulate(trace, spec)
    assert sim.accesses == live["accesses"]
    for tier, counter in (("hot", "hot_hits"), ("warm", "warm_hits"), ("cold", "cold_misses")):
        simulated = {"hot": sim.hot_hits, "warm": sim.warm_hits, "cold": sim.cold_misses}[tier] / sim.accesses
        measured = live[counter] / live["accesses"]
        print(f"{hot_policy}/{warm_policy} {tier}: live {measured:.3f} simulated {simulated:.3f}")
        assert abs(simulated - measured) <= TOLERANCE, (tier, measured, simulated, live, sim)


def test_bench_min_is_over_the_accesses_the_hot_hit_counter_counts(bucket, tier_config, make_dataset):
    """The benchmark's MIN column (tierload_tools.bench.belady.dataset_min_hit_ratios) is over the very
    accesses the live node cache counts: packs of ~8 samples are one access each, not eight, so
    hot hit <= MIN in every epoch. Per sample, MIN counted a pack's later samples as hits (~85%
    in a cold first epoch, where the hot tier hits nothing)."""
    import numpy as np

    from tierload.frames.blockfile import HEADER_SIZE
    from tierload_tools.bench.belady import dataset_min_hit_ratios, min_hit_ratios

    name, fs = bucket
    count = 400
    put_indexed_objects(fs, f"{name}/packed", count, size=1000)
    # packs of 8 objects: a pack is at most 1/16 of the hot tier (tierload.data.packs), ~1/3 of the data fits
    config = tier_config(hot=130_000, warm=None, prefetch={"depth_blocks": 2},
                         manifest={"pack_threshold_bytes": "2KiB", "pack_target_bytes": 8000})
    dataset = make_dataset(f"s3://{name}/packed", config, layout="files", batch_size=6)
    manifest = dataset.manifest
    assert len(manifest.blocks) < manifest.num_samples // 4  # packed
    dataset._link.call(lambda cache: cache.record_trace(True))
    epochs, hot = 3, []
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=6, collate_fn=lambda batch: batch)
        assert sorted(index_of(s) for batch in loader for s, _ in batch) == list(range(count))
        stats = dataset.epoch_stats(epoch)
        hot.append(stats["hot_hits"] / stats["accesses"])
    recorded = dataset._link.call(lambda cache: cache.record_trace(False))
    capacity = config.hot.capacity_bytes
    reference = dataset_min_hit_ratios(dataset, epochs, capacity)
    ratios = reference.ratios
    assert reference.exact  # packs of one size: MIN is the optimum, so the bound below is one
    # MIN on the recorded trace, epoch by epoch, is the same figure
    index = {block.key: i for i, block in enumerate(manifest.blocks)}
    live_trace = [np.array([index[key] for key, _, e in recorded if e == epoch]) for epoch in range(epochs)]
    sizes = np.array([block.length + HEADER_SIZE for block in manifest.blocks])
    assert ratios == min_hit_ratios(live_trace, sizes, capacity)
    assert ratios[0] == 0.0 and all(h <= m + 1e-9 for h, m in zip(hot, ratios, strict=True)), (hot, ratios)
    per_sample = min_hit_ratios([manifest.sample_block[dataset.rank_order(e)] for e in range(epochs)], sizes, capacity)
    print("hot", hot, "MIN", ratios, "per-sample MIN", per_sample, "blocks", len(manifest.blocks))
    assert per_sample[0] > hot[0] + 0.5, per_sample  # the old definition's inflation
