"""Elastic resumption (issue 22, item 2): a state saved at one world size and worker count resumes
at another, from rank 0's state alone, and again at a third, with every sample id checked.

Ranks are simulated in one process through rank/world_size (as tests/test_resume.py does); the
real processes under gloo DDP are in tests/test_elastic_ddp.py. Real moto S3 over HTTP, a real
local Ray, real tier directories; nothing mocked.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload import collate
from tierload.errors import ConfigError

stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed "
                               "(pip install 'tierload[test]')")
StatefulDataLoader = stateful.StatefulDataLoader

COUNT, BATCH = 100, 4


@pytest.fixture(scope="module")
def shared_config(module_tier_config):
    """The tiers (hot 1 MiB, no warm) of one deployment the tests of this module share: each reads its
    own fresh objects, and what it asserts (sample ids, states, one dataset's epoch counters) does not
    depend on who else the node cache served."""
    return module_tier_config(hot="1MiB", warm=None)


@pytest.fixture
def make_rank(bucket, shared_config, module_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", COUNT, size=64)

    def make(rank: int, world: int, **kwargs):
        return module_dataset(f"s3://{name}/ds", shared_config, layout="files", seed=3, batch_size=BATCH, rank=rank,
                              world_size=world, **kwargs)
    return make


def ids_of(batch) -> list[int]:
    return [index_of(sample) for sample in batch[0]]


def run_rank(dataset, workers: int, stateful_loader: bool, batches: int | None):
    """Iterate one rank's loader for ``batches`` batches, then its ids and its state; or to the end (None),
    then its ids and whether the loader yielded ``len(loader)`` batches."""
    extra = {"prefetch_factor": 2} if workers else {}
    kind = StatefulDataLoader if stateful_loader else DataLoader
    loader = kind(dataset, batch_size=BATCH, num_workers=workers, collate_fn=collate, **extra)
    ids: list[int] = []
    if batches is None:
        taken = 0
        for batch in loader:
            ids.extend(ids_of(batch))
            taken += 1
        return ids, taken == len(loader)
    iterator = iter(loader)
    for _ in range(batches):
        ids.extend(ids_of(next(iterator)))
    state = loader.state_dict() if stateful_loader else dataset.state_dict(batches_consumed=batches)
    del iterator
    return ids, json.loads(json.dumps(state))  # a state survives JSON (a checkpoint file)


@pytest.mark.parametrize("stateful_loader", [True, False], ids=["StatefulDataLoader", "DataLoader"])
def test_two_ranks_then_four_then_three_yield_every_sample_once(make_rank, stateful_loader):
    """(2 ranks, 2 workers) 3 batches -> (4, 1) 2 batches -> (3, 2) to the end, each segment from rank 0's
    state only: 2x12 + 4x8 + 44 remaining samples; at 3 ranks 44 pads to 45 (one repeat, like
    DistributedSampler); every one of the 100 ids appears, and nothing else repeats."""
    seen: Counter = Counter()
    state = None
    per_rank_counts = []
    for world, workers, batches in ((2, 2, 3), (4, 1, 2), (3, 2, None)):
        states = []
        for rank in range(world):
            dataset = make_rank(rank, world)
            if state is not None:
                dataset.load_state_dict(state)  # rank 0's state, on every new rank
            per_rank_counts.append(len(dataset))
            ids, rank_state = run_rank(dataset, workers, stateful_loader, batches)
            assert len(ids) == (len(dataset) if batches is None else batches * BATCH)
            seen.update(ids)
            states.append(rank_state)
            if batches is None:
                assert rank_state is True  # len(loader) of the resumed segment is exact
        state = states[0]
        if batches is not None:
            # lockstep: every rank's state says the same, but for its rank
            assert len({json.dumps(_without_rank(s), sort_keys=True) for s in states}) == 1
    assert per_rank_counts == [50] * 2 + [19] * 4 + [15] * 3  # 100/2; (100-24)/4; ceil((76-32)/3)
    assert set(seen) == set(range(COUNT))
    assert sum(seen.values()) == COUNT + 1 and max(seen.values()) == 2


def _without_rank(state: dict) -> dict:
    """A state (or a loader's) with its ranks' own fields dropped, to compare ranks' states."""
    if "_snapshot" in state:  # a StatefulDataLoader's: compare its dataset states
        workers = state["_snapshot"]["_worker_snapshots"]
        return {key: _without_rank(worker["dataset_state"]) for key, worker in workers.items()}
    if "dataset_state" in state:
        return _without_rank(state["dataset_state"])
    return {key: value for key, value in state.items() if key != "rank"}


def test_the_chain_is_kept_and_a_same_size_resume_continues_it(make_rank):
    """A state taken after an elastic resume holds the chain; loading it at that same world size resumes
    mid-segment (the next samples of the resumed rank's order, in order)."""
    first = make_rank(0, 2)
    _, state = run_rank(first, 0, False, 3)
    assert state["chain"] == [] and state["position"] == 12 and state["dataset_samples"] == COUNT
    second = make_rank(1, 4)
    second.load_state_dict(state)
    order = [int(i) for i in second.rank_order()]
    assert len(order) == len(second) == 19
    ids, state4 = run_rank(second, 0, False, 1)
    assert ids == order[:4]
    assert state4["chain"] == [[2, 12]] and state4["world_size"] == 4 and state4["position"] == 4
    again = make_rank(1, 4)
    again.load_state_dict(state4)
    rest, _ = run_rank(again, 2, False, None)
    assert rest == order[4:]


def test_states_of_another_dataset_shuffle_or_a_bad_chain_are_refused(make_rank):
    dataset = make_rank(0, 2)
    state = dataset.state_dict()
    with pytest.raises(ConfigError, match="shuffle='sample'"):
        make_rank(0, 2, shuffle=False).load_state_dict({**state, "shuffle": "sample"})
    with pytest.raises(ConfigError, match="different dataset contents"):
        make_rank(0, 3).load_state_dict({**state, "dataset_id": "0" * 24})
    with pytest.raises(ConfigError, match="samples per epoch"):
        make_rank(0, 3).load_state_dict({**state, "dataset_samples": COUNT + 1})
    with pytest.raises(ConfigError, match="consumed=60"):
        make_rank(0, 3).load_state_dict({**state, "chain": [[2, 60]]})
    worker_state = {**state, "worker": {"id": 0, "num_workers": 2, "yielded": 4}}
    with pytest.raises(ConfigError, match="whole StatefulDataLoader"):
        make_rank(0, 3).load_state_dict(worker_state)
    per_rank = math.ceil(COUNT / 2)
    assert state["num_samples"] == per_rank


def _epoch_counters(dataset, epoch: int, warm: bool) -> dict:
    """Summed counters of this dataset's streams of ``epoch``: the warm stream's, or the others'."""
    dataset_id = dataset.manifest.dataset_id
    rows = dataset._started_link().call(lambda cache: cache.stream_stats(dataset_id), wait_s=30.0)
    totals: Counter = Counter()
    for row in rows:
        if row.epoch == epoch and row.stream_id.endswith(".warm") == warm and f"/{dataset._stream_owner}" in \
                row.stream_id:
            totals.update({k: v for k, v in row.counters.items() if k in ("accesses", "hot_hits", "cold_gets")})
    return totals


@pytest.mark.parametrize("warm", [True, False])
def test_load_state_dict_has_the_node_cache_fetch_the_new_ranks_first_blocks(make_rank, warm):
    """Warm resume: after load_state_dict at another world size, before any iteration, the node cache
    has fetched the resumed rank's first blocks (the warm stream's cold GETs); the epoch's own stream
    then finds every one of them hot. With warm=False nothing is fetched before the loader asks."""
    import time

    state = {**make_rank(0, 2).state_dict(), "position": 12}  # rank 0 of 2 after 12 samples (nothing read)
    resumed = make_rank(1, 4)
    resumed.load_state_dict(state, warm=warm)
    expected = len(resumed)  # 19 samples of one block each: fewer than prefetch.depth_blocks
    deadline = time.monotonic() + 60
    while warm and _epoch_counters(resumed, 0, True)["cold_gets"] < expected and time.monotonic() < deadline:
        time.sleep(0.1)  # waiting for the fetches, not timing them
    before = _epoch_counters(resumed, 0, True)
    assert before["cold_gets"] == (expected if warm else 0)
    ids, complete = run_rank(resumed, 0, False, None)
    assert complete and len(ids) == expected
    epoch = _epoch_counters(resumed, 0, False)
    assert epoch["accesses"] == expected
    assert epoch["hot_hits"] == (expected if warm else 0) and epoch["cold_gets"] == (0 if warm else expected)


def test_a_loader_state_loaded_into_a_new_loader_at_another_world_size_says_what_to_do(make_rank):
    """torchdata hands each worker its own state on loader.load_state_dict(); at another world size one
    worker cannot know what the others yielded, so the worker refuses, naming the way that works."""
    _, state = run_rank(make_rank(0, 2), 2, True, 3)
    loader = StatefulDataLoader(make_rank(0, 3), batch_size=BATCH, num_workers=2, collate_fn=collate)
    loader.load_state_dict(state)
    with pytest.raises(ConfigError, match=r"dataset.load_state_dict\(loader_state\)"):
        next(iter(loader))
