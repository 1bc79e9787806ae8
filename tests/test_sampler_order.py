"""The user's order (issue 22, item 3): ``TieredDataset(sampler=...)``.

Real moto S3 over HTTP, a real local Ray, real tier directories; nothing mocked. The sampler's
sequence is the epoch's order and the node cache's known future: with the clairvoyant policy the
live hot hit count equals Belady's MIN (the simulator's) on the very block sequence.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader, DistributedSampler, WeightedRandomSampler

from tierload.data.runs import counted_runs
from tierload.errors import ConfigError, SampleIndexError, ServiceError
from tierload.simulator.belady import min_hits


def test_a_weighted_sampler_with_replacement_is_planned_and_hits_as_often_as_beladys_min(
        bucket, tier_config, make_dataset):
    name, fs = bucket
    count = 24
    put_indexed_objects(fs, f"{name}/ds", count, size=1000)
    config = tier_config(hot=5 * 1040, warm=None, prefetch={"depth_blocks": 0},
                         policy={"hot": {"eviction": "clairvoyant"}})
    weights = torch.linspace(0.2, 3.0, count)  # skewed: some samples come back often
    sampler = WeightedRandomSampler(weights, num_samples=150, replacement=True,
                                    generator=torch.Generator().manual_seed(3))
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", sampler=sampler)
    manifest = dataset.manifest
    sizes = np.array([block.length for block in manifest.blocks])
    assert set(sizes.tolist()) == {1000} and len(manifest.blocks) == count  # one block per sample

    dataset._link.call(lambda cache: cache.record_trace(True))
    dataset.set_epoch(0)
    order = dataset.rank_order(0)
    assert order.dtype == np.int64 and len(order) == 150 == len(dataset)
    assert len(np.unique(order)) < len(order)  # blocks repeat
    loader = DataLoader(dataset, batch_size=5, collate_fn=list)
    yielded = [index_of(sample) for batch in loader for sample, _ in batch]
    sample_object = {i: index_of(dataset[i][0]) for i in range(count)}
    assert yielded == [sample_object[int(i)] for i in order]  # the sampler's order, exactly
    recorded = dataset._link.call(lambda cache: cache.record_trace(False))
    stats = dataset.epoch_stats(0)

    blocks = manifest.sample_block[order].astype(np.int64)
    accesses = counted_runs(blocks, np.empty(0, np.int64), 1)[0]  # no look-ahead: the next epoch is unknown
    index = {block.key: i for i, block in enumerate(manifest.blocks)}
    assert [index[key] for key, _, _ in recorded] == accesses.tolist()
    stored = np.zeros(len(manifest.blocks), np.int64)
    for key, nbytes, _ in recorded:
        stored[index[key]] = nbytes
    best = min_hits(accesses, stored, config.hot.capacity_bytes, engine="reference")
    print("accesses", len(accesses), "live hot hits", stats["hot_hits"], "MIN", best.hits)
    assert best.exact and 0 < best.hits < len(accesses)
    assert stats["accesses"] == len(accesses)
    assert stats["hot_hits"] == best.hits


@pytest.fixture(scope="module")
def small_hot_config(module_tier_config):
    """A 1 MiB hot tier and no warm tier, the same tier directory for every test that asks for it:
    they share one deployment instead of starting one each (~1.5 CPU-s a deployment). Each reads
    its own bucket and checks orders and samples, never what the tier held before it."""
    return module_tier_config(hot="1MiB", warm=None)


@pytest.fixture(scope="module")
def shared_dataset(module_dataset, small_hot_config):
    """Like ``make_dataset``, on ``small_hot_config``'s deployment, which stops when the module ends."""
    def make(url, **kwargs):
        return module_dataset(url, small_hot_config, **kwargs)
    return make


def test_each_epoch_iterates_the_sampler_again_after_its_set_epoch_and_workers_share_that_order(
        bucket, shared_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=100)
    sampler = DistributedSampler(range(40), num_replicas=2, rank=1, shuffle=True, seed=5)
    dataset = shared_dataset(f"s3://{name}/ds", layout="files", sampler=sampler, batch_size=4)
    objects = {i: index_of(dataset[i][0]) for i in range(40)}
    seen = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        sampler.set_epoch(epoch)
        expected = [objects[i] for i in sampler]
        loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=list)
        got = [index_of(sample) for batch in loader for sample, _ in batch]
        assert got == expected  # workers take whole batches in turn: the loader yields the sampler's order
        seen.append(got)
    assert seen[0] != seen[1] and len(seen[0]) == 20


@pytest.mark.parametrize("indices, bad", [([0, 3, 12], 12), ([1, -1], -1)])
def test_an_index_outside_the_dataset_names_itself_and_the_valid_range(bucket, shared_dataset, indices, bad):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 12, size=100)
    with pytest.raises(SampleIndexError, match=rf"sampler yielded index {bad} at position \d of epoch 0 .*"
                                               r"valid sample indices are 0 \.\. 11"):
        shared_dataset(f"s3://{name}/ds", layout="files", sampler=indices)


def test_a_sampler_epoch_resumes_mid_epoch_with_exactly_the_rest(bucket, shared_dataset):
    """A sampler that gives the same sequence for the same epoch (DistributedSampler) resumes exactly:
    the resumed dataset iterates its own sampler for the state's epoch again."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=100)
    def sampler():
        return DistributedSampler(range(30), num_replicas=1, rank=0, shuffle=True, seed=11)

    first = shared_dataset(f"s3://{name}/ds", layout="files", sampler=sampler())
    first.set_epoch(2)
    iterator = iter(first)
    taken = [index_of(next(iterator)[0]) for _ in range(13)]
    state = first.state_dict()
    iterator.close()
    assert state["epoch"] == 2 and state["shuffle"] == "sampler"

    resumed = shared_dataset(f"s3://{name}/ds", layout="files", sampler=sampler())
    resumed.load_state_dict(state)
    rest = [index_of(sample) for sample, _ in resumed]
    reference = sampler()
    reference.set_epoch(2)
    objects = {i: index_of(resumed[i][0]) for i in range(30)}
    assert taken + rest == [objects[i] for i in reference]
    # The sampler's sequence is each rank's own order: it cannot be split over another world size.
    elsewhere = shared_dataset(f"s3://{name}/ds", layout="files", sampler=sampler(), rank=0, world_size=2)
    with pytest.raises(ConfigError, match="world size 1, this rank runs at 2.*sampler="):
        elsewhere.load_state_dict(state)


def test_an_epochs_order_is_iterated_once_unless_set_epoch_asks_again():
    from tierload.loader.sampler_order import SamplerOrders

    class CountingSampler:
        def __init__(self):
            self.iterations, self.epoch = 0, -1

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            self.iterations += 1
            return iter(np.random.default_rng(self.iterations).permutation(10).tolist())

    sampler = CountingSampler()
    orders = SamplerOrders(sampler)
    zero = orders.refresh(0, 10)
    one = orders.order(1, 10)
    assert sampler.iterations == 2 and sampler.epoch == 1
    assert np.array_equal(orders.order(0, 10), zero) and np.array_equal(orders.order(1, 10), one)
    assert sampler.iterations == 2  # read back, not iterated again
    in_worker = pickle.loads(pickle.dumps(orders))  # what a spawned worker holds: no sampler, the files
    assert in_worker.sampler is None and np.array_equal(in_worker.order(1, 10), one)
    with pytest.raises(ServiceError, match="never materialised"):
        in_worker.order(5, 10)
    again = orders.refresh(1, 10)
    assert sampler.iterations == 3 and np.array_equal(in_worker.order(1, 10), again)
    assert sorted(again.tolist()) == list(range(10))
