"""Token windows with the job shapes of issue 22 (issue 23 item 1): the block-aware shuffle keeps
a block's windows together, a StatefulDataLoader state saved at (2 ranks x 2 workers) resumes at
(3 ranks x 1 worker) with every remaining window once, and a tokens source inside a mixture yields
the mixture's exact order with every window's tokens checked.

The corpus is test_layout_tokens's (raw uint16 .bin, uint32 .npy, a Megatron pair, a 2-D .npy):
windows cross file boundaries, so each window's first token says which window it is. Real moto S3
over HTTP, a real local Ray, real files; nothing mocked.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from test_layout_tokens import BLOCK_BYTES, SEQ_LEN, WIDTH, put_corpus, token_config, window_ids
from torch.utils.data import DataLoader

from tierload import collate
from tierload.loader.mixture_sources import Source

stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed "
                               "(pip install 'tierload[test]')")


def test_block_aware_shuffle_keeps_each_blocks_windows_together(bucket, tier_config, make_dataset):
    """window_blocks=1: the epoch order visits each block's windows as one run (block-aware), the
    blocks in a shuffled order that changes with the epoch."""
    name, fs = bucket
    expected = put_corpus(fs, f"{name}/tok", first_tokens=600)
    dataset = make_dataset(f"s3://{name}/tok", token_config(tier_config), seed=5, batch_size=2, window_blocks=1)
    block_of = dataset.manifest.sample_block
    assert len(dataset.manifest.blocks) > 10
    block_orders = []
    for epoch in range(2):
        order = dataset.global_order(epoch)
        assert sorted(order.tolist()) == list(range(len(expected)))
        runs = block_of[order]
        starts = np.flatnonzero(np.diff(runs)) + 1
        assert len(starts) + 1 == len(dataset.manifest.blocks)  # one run per block: never split
        block_orders.append(runs[np.concatenate(([0], starts))].tolist())
    assert block_orders[0] != sorted(block_orders[0]) and block_orders[0] != block_orders[1]
    dataset.set_epoch(1)
    got = window_ids(DataLoader(dataset, batch_size=2, num_workers=0, collate_fn=collate), expected)
    assert got == dataset.global_order(1).tolist()  # window id == sample id: the stream is 0, 1, 2, ...


def test_stateful_loader_state_resumes_windows_at_another_world_size(bucket, tier_config, make_dataset):
    """(2 ranks, 2 workers) for 3 batches of 2 each, then rank 0's StatefulDataLoader state on
    (3 ranks, 1 worker) to the end: the epoch's windows all come, each once, bar the one padding
    repeat a 3-way split may add (like DistributedSampler)."""
    name, fs = bucket
    expected = put_corpus(fs, f"{name}/tok", first_tokens=600)  # 43 windows
    config = token_config(tier_config)

    def rank(index: int, world: int):
        return make_dataset(f"s3://{name}/tok", config, seed=4, batch_size=2, rank=index, world_size=world)

    consumed: list[int] = []
    states = []
    for index in range(2):
        dataset = rank(index, 2)
        loader = stateful.StatefulDataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate)
        iterator = iter(loader)
        consumed += window_ids([next(iterator) for _ in range(3)], expected)
        states.append(json.loads(json.dumps(loader.state_dict())))  # a checkpoint file
        del iterator
    rest: list[int] = []
    for index in range(3):
        resumed = rank(index, 3)
        resumed.load_state_dict(states[0])
        rest += window_ids(DataLoader(resumed, batch_size=2, num_workers=1, collate_fn=collate), expected)
    seen = Counter(consumed + rest)
    assert len(consumed) == 12 and set(seen) == set(range(len(expected)))
    repeats = seen - Counter(range(len(expected)))
    assert sum(repeats.values()) <= 2 and not set(repeats) & set(consumed)  # padding only, from the rest


def test_tokens_source_inside_a_mixture(bucket, s3, tier_config, tmp_path, ray_session):
    """A tokens source (S3) and a JSONL source (file://) at 0.6 / 0.4, 2 ranks x 2 workers: each rank
    reads exactly its mixed order, every token window decoded with its own tokens."""
    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset

    name, fs = bucket
    expected = put_corpus(fs, f"{name}/tok", first_tokens=600)  # 43 windows
    lines = tmp_path / "lines"
    lines.mkdir()
    (lines / "a.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(20)))
    sources = [Source(f"s3://{name}/tok", 0.6, "tokens", storage_options=s3.storage_options),
               Source(f"file://{lines}", 0.4, "jsonl")]
    config = tier_config(manifest={"seq_len_tokens": SEQ_LEN, "block_bytes": BLOCK_BYTES})
    ranks = [TieredDataset(sources, config, rank=r, world_size=2, batch_size=4, seed=2) for r in range(2)]
    try:
        mixture = ranks[0]._mixture
        per_source: Counter = Counter()
        for index, dataset in enumerate(ranks):
            order = dataset.rank_order(0)
            source_of = mixture.source_of(order)
            want = list(zip(source_of.tolist(), (order - mixture.sample_offsets[source_of]).tolist(), strict=True))
            got = []
            for batch in DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=list):
                for sample, label, source in batch:
                    assert label == -1
                    if source == 0:
                        assert sample.dtype == torch.int64 and sample.shape == (WIDTH,)
                        window = int(sample[0]) // WIDTH
                        assert np.array_equal(sample.numpy(), expected[window])
                        got.append((0, window))
                    else:
                        got.append((1, int(sample["id"])))
            assert got == want, index
            per_source.update(source for source, _ in got)
        counts = Counter(dict(zip((0, 1), mixture.counts(0).tolist(), strict=True)))  # 0.6 / 0.4 of the epoch
        assert counts <= per_source and sum((per_source - counts).values()) <= 1  # 2 ranks pad an odd epoch by one
    finally:
        stop_actors(config)
