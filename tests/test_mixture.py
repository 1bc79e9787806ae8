"""Weighted mixtures end to end (issue 22, item 1): TieredDataset over 2 and 3 sources of different
sizes and layouts (raw files and .npy on moto S3, JSONL on file://), 2 DataLoader workers, 2 ranks
(rank/world_size arguments), every sample id counted per source and per epoch; the node cache sees
the mixture as one stream; a curriculum change resumed mid-epoch keeps every source's passes whole.

Real moto S3 over HTTP, real files, a real local Ray, real tier directories.
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter

import numpy as np
import pytest
from torch.utils.data import DataLoader

import tierload
from tierload.loader.dataset import TieredDataset
from tierload.loader.mixture_sources import Source

from helpers import index_of, put_indexed_objects

FILES, LINES, ROWS = 80, 20, 12


@pytest.fixture(scope="module")
def sources(s3, tmp_path_factory):
    """Three sources: raw files (S3, 80 samples), JSONL (file://, 20), .npy rows (S3, 12).

    Written once for the module (every test only reads them): 81 PUTs to moto instead of 81 a test.
    """
    name = f"mixture-{os.getpid()}"
    fs = s3.create_bucket(name)
    put_indexed_objects(fs, f"{name}/files", FILES, size=64)
    buffer = io.BytesIO()
    np.save(buffer, np.repeat(np.arange(ROWS, dtype=np.int64)[:, None], 4, axis=1))
    fs.pipe_file(f"{name}/rows/x.npy", buffer.getvalue())
    fs.invalidate_cache()
    lines = tmp_path_factory.mktemp("lines")
    (lines / "a.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(LINES)))
    options = s3.storage_options
    return [Source(f"s3://{name}/files", layout="files", storage_options=options),
            Source(f"file://{lines}", layout="jsonl"),
            Source(f"s3://{name}/rows", layout="npy", storage_options=options)]


def local_id(sample, source: int) -> int:
    """The id a test sample carries: a raw file's index, a JSONL record's id, a .npy row's value."""
    if source == 0:
        return index_of(sample)
    if source == 1:
        return int(sample["id"])
    return int(sample[0])


def expected(dataset, epoch: int, rank: int) -> list[tuple[int, int]]:
    """(source, local id) of the rank's order, from the mixture's pure arithmetic."""
    mixture = dataset._mixture
    order = dataset.rank_order(epoch)
    source = mixture.source_of(order)
    return list(zip(source.tolist(), (order - mixture.sample_offsets[source]).tolist(), strict=True))


def read_loader(dataset, workers: int, batch_size: int) -> list[tuple[int, int]]:
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=list)
    return [(source, local_id(sample, source)) for batch in loader for sample, _, source in batch]


@pytest.fixture(scope="module")
def shared_tiers(module_tier_config):
    """One deployment (node cache and coordinator) for the module's mixtures, whose tests check
    orders and samples, never what the tiers held before them: ~1.5 CPU-s saved per test."""
    return module_tier_config()


@pytest.fixture
def mixtures(shared_tiers):
    def make(sources, **kwargs):
        return TieredDataset(sources, shared_tiers, **kwargs)

    return make


@pytest.fixture
def own_tiers_mixtures(tier_config, ray_session):
    """Mixtures on a deployment of this test's own, for a test that counts the node cache's streams."""
    from tierload.deploy.runtime import stop_actors

    config = tier_config()

    def make(sources, **kwargs):
        return TieredDataset(sources, config, **kwargs)

    yield make
    stop_actors(config)


def test_two_sources_70_30_over_two_ranks_and_two_workers(sources, own_tiers_mixtures):
    two = [Source(sources[0].url, 0.7, "files", storage_options=sources[0].storage_options),
           Source(sources[1].url, 0.3, "jsonl")]
    ranks = [own_tiers_mixtures(two, rank=rank, world_size=2, batch_size=4, seed=7) for rank in range(2)]
    assert ranks[0]._mixture.counts(0).tolist() == [70, 30]  # 100 samples an epoch: 0.7 / 0.3 of them
    streams: list[list[int]] = [[], []]
    for epoch in range(2):
        per_source: Counter = Counter()
        for rank, dataset in enumerate(ranks):
            dataset.set_epoch(epoch)
            assert len(dataset) == 50
            got = read_loader(dataset, workers=2, batch_size=4)
            assert got == expected(dataset, epoch, rank)  # the rank's exact order, both workers together
            per_source.update(source for source, _ in got)
            for source, sample in got:
                streams[source].append(sample)
        assert per_source == {0: 70, 1: 30}
    # Over the two epochs: source 0 read 140 = one whole pass and 60 of the next; source 1 (20
    # samples, 30 an epoch) three whole passes; within each pass every sample once.
    for stream, size in ((streams[0], FILES), (streams[1], LINES)):
        order = sorted(stream)  # the ranks split each epoch, so compare passes as multisets
        counts = Counter(order)
        assert set(counts) <= set(range(size)) and max(counts.values()) - min(counts.values()) <= 1
    assert Counter(streams[1]) == {i: 3 for i in range(LINES)}
    # One stream per rank and epoch on the node cache, under the mixture's dataset id, none per source.
    link = ranks[0]._started_link()
    mixed = link.call(lambda cache: cache.stream_stats(ranks[0].manifest.dataset_id), wait_s=30.0)
    assert {row.epoch for row in mixed} == {0, 1} and len(mixed) >= 4
    for part in ranks[0]._sources.parts:
        assert link.call(lambda cache, part=part: cache.stream_stats(part.dataset_id), wait_s=30.0) == []


def test_three_sources_1_1_2_drop_last_and_the_source_of_each_sample(sources, mixtures):
    weighted = [Source(s.url, w, s.layout, storage_options=s.storage_options) for s, w in zip(sources, (1, 1, 2))]
    ranks = [mixtures(weighted, rank=rank, world_size=2, batch_size=5, drop_last=True, seed=3,
                      epoch_samples=61) for rank in range(2)]
    assert ranks[0]._mixture.counts(0).tolist() == [15, 15, 31]
    assert len(ranks[0]) == 30  # 61 samples over 2 ranks, drop_last: 30 each
    for epoch in range(2):
        seen: Counter = Counter()
        for rank, dataset in enumerate(ranks):
            dataset.set_epoch(epoch)
            got = read_loader(dataset, workers=2, batch_size=5)
            assert got == expected(dataset, epoch, rank) and len(got) == 30
            seen.update(got)
        order = ranks[0]._mixture.epoch_order(3, epoch)[:60]  # the epoch's first 60: the one left over is dropped
        source = ranks[0]._mixture.source_of(order)
        assert seen == Counter(zip(source.tolist(), (order - ranks[0]._mixture.sample_offsets[source]).tolist()))
        # The .npy source (12 rows, 31 an epoch) wraps into its next passes: 31 stream positions
        # touch at most 4 passes, and a row comes once in each.
        assert max(seen.values()) <= 4 and {row for src, row in seen if src == 2} == set(range(ROWS))
    # tierload.collate gives a mixture's batches a third field: the source of each sample.
    loader = DataLoader(ranks[1], batch_size=5, num_workers=0, collate_fn=tierload.collate)
    batch = next(iter(loader))
    assert len(batch) == 3 and batch[2].dtype.is_floating_point is False and len(batch[2]) == 5


def test_weight_zero_source_is_never_read(sources, mixtures):
    two = [Source(sources[0].url, 1, "files", storage_options=sources[0].storage_options),
           Source(sources[1].url, 0, "jsonl")]
    dataset = mixtures(two, batch_size=8)
    assert len(dataset) == FILES  # the default epoch counts only positively weighted sources
    got = read_loader(dataset, workers=0, batch_size=8)
    assert Counter(source for source, _ in got) == {0: FILES}
    assert sorted(sample for _, sample in got) == list(range(FILES))


def test_curriculum_change_resumed_mid_epoch_keeps_passes_whole(sources, mixtures):
    two = [Source(sources[0].url, 0.5, "files", storage_options=sources[0].storage_options),
           Source(sources[1].url, 0.5, "jsonl")]
    first = mixtures(two, batch_size=4, seed=11)
    loader = iter(DataLoader(first, batch_size=4, num_workers=0, collate_fn=list))
    consumed = [(s, local_id(x, s)) for _ in range(10) for x, _, s in next(loader)]
    state = first.state_dict()
    # The next run changes the weights from epoch 1 on, declared as a curriculum step, and resumes.
    second = mixtures(two, batch_size=4, seed=0, curriculum={1: [0.9, 0.1]})
    second.load_state_dict(state)
    rest = read_loader(second, workers=2, batch_size=4)
    assert consumed + rest == expected(first, 0, 0)  # epoch 0: every sample once, in order
    second.set_epoch(1)
    assert second._mixture.counts(1).tolist() == [90, 10]
    epoch1 = read_loader(second, workers=2, batch_size=4)
    assert Counter(s for s, _ in epoch1) == {0: 90, 1: 10}
    # Source 1: 50 in epoch 0 (2.5 passes) and 10 in epoch 1 complete its third pass exactly.
    stream1 = [x for s, x in consumed + rest + epoch1 if s == 1]
    for start in range(0, 60, LINES):
        assert sorted(stream1[start:start + LINES]) == list(range(LINES))


def test_a_state_is_refused_under_other_weights_for_its_epoch(sources, mixtures):
    from tierload.errors import ConfigError

    two = [Source(sources[0].url, 0.5, "files", storage_options=sources[0].storage_options),
           Source(sources[1].url, 0.5, "jsonl")]
    first = mixtures(two, batch_size=4)
    loader = iter(DataLoader(first, batch_size=4, num_workers=0, collate_fn=list))
    next(loader)
    state = first.state_dict()
    assert state["mixture_counts"] == [50, 50]
    changed = [Source(sources[0].url, 0.6, "files", storage_options=sources[0].storage_options),
               Source(sources[1].url, 0.4, "jsonl")]
    with pytest.raises(ConfigError, match=r"\[50, 50\].*\[60, 40\].*curriculum"):
        mixtures(changed, batch_size=4).load_state_dict(state)


def test_a_mixture_resumes_at_another_world_size_with_every_remaining_sample_once(sources, mixtures):
    """Elastic resumption of a mixture (issue 22, item 2): 2 ranks stop after 3 batches each; rank
    0's state alone resumes the epoch on 3 ranks; together the 5 loops yield epoch 0's global
    order exactly once (drop_last=False pads the last rank's slice with repeats, no sample lost)."""
    two = [Source(sources[0].url, 0.7, "files", storage_options=sources[0].storage_options),
           Source(sources[1].url, 0.3, "jsonl")]
    first = [mixtures(two, batch_size=4, seed=5, rank=rank, world_size=2) for rank in range(2)]
    consumed: list[int] = []
    for dataset in first:
        loader = iter(DataLoader(dataset, batch_size=4, num_workers=0, collate_fn=list))
        for _ in range(3):
            consumed += [int(dataset._mixture.sample_offsets[s]) + local_id(x, s) for x, _, s in next(loader)]
    state = first[0].state_dict()
    rest: list[int] = []
    for rank in range(3):
        resumed = mixtures(two, batch_size=4, seed=0, rank=rank, world_size=3)
        resumed.load_state_dict(state)
        offsets = resumed._mixture.sample_offsets
        rest += [int(offsets[s]) + local_id(x, s) for x, _, s in
                 (item for batch in DataLoader(resumed, batch_size=4, num_workers=2, collate_fn=list) for item in batch)]
    global_order = first[0].global_order(0).tolist()
    everything = Counter(consumed + rest)
    assert set(everything) == set(global_order) and len(consumed) == 24
    assert everything - Counter(global_order) <= Counter(rest)  # any repeat is padding of the new split
    assert sum((everything - Counter(global_order)).values()) < 3  # at most one pad per new rank


def test_a_sampler_over_several_sources_is_refused_with_the_way_that_works(sources, tier_config):
    from tierload.errors import ConfigError

    with pytest.raises(ConfigError, match=r"sampler=\[0, 1\] with 2 sources.*weight"):
        TieredDataset(sources[:2], tier_config(), sampler=[0, 1], lazy=True)


def test_a_stateful_loaders_mixture_state_resumes_at_another_world_size(sources, mixtures):
    """The same under torchdata's StatefulDataLoader: (2 ranks, 2 workers) for 3 batches, then rank
    0's loader state on (3 ranks, 1 worker): epoch 0's global order exactly once, padding aside."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed")
    two = [Source(sources[0].url, 0.7, "files", storage_options=sources[0].storage_options),
           Source(sources[1].url, 0.3, "jsonl")]

    def global_ids(dataset, batch) -> list[int]:
        return [int(dataset._mixture.sample_offsets[s]) + local_id(x, s) for x, _, s in batch]

    consumed: list[int] = []
    states = []
    for rank in range(2):
        dataset = mixtures(two, batch_size=4, seed=9, rank=rank, world_size=2)
        loader = stateful.StatefulDataLoader(dataset, batch_size=4, num_workers=2, collate_fn=list)
        iterator = iter(loader)
        for _ in range(3):
            consumed += global_ids(dataset, next(iterator))
        states.append(loader.state_dict())
        del iterator
    rest: list[int] = []
    for rank in range(3):
        resumed = mixtures(two, batch_size=4, seed=0, rank=rank, world_size=3)
        resumed.load_state_dict(states[0])  # the whole loader state, rank 0's
        for batch in DataLoader(resumed, batch_size=4, num_workers=1, collate_fn=list):
            rest += global_ids(resumed, batch)
    global_order = mixtures(two, batch_size=4, seed=9).global_order(0).tolist()
    everything = Counter(consumed + rest)
    assert len(consumed) == 24 and set(everything) == set(global_order)
    assert everything - Counter(global_order) <= Counter(rest) and sum((everything - Counter(global_order)).values()) < 3
