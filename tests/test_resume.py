"""Mid-epoch resumption (B19, B20): state_dict/load_state_dict, torchdata's StatefulDataLoader,
a different num_workers on resume, and a restart in a new process whose cache is warm again.

Real moto S3 over HTTP, a real local Ray, real tier directories; nothing mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload import collate

stateful = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata is not installed "
                               "(pip install 'tierload[test]')")
StatefulDataLoader = stateful.StatefulDataLoader

COUNT = 100


def indices(batches) -> list[int]:
    return [index_of(sample) for samples, _ in batches for sample in samples]


def take(iterator, count: int) -> list:
    return [next(iterator) for _ in range(count)]


def loader_kwargs(num_workers: int) -> dict:
    extra = {"prefetch_factor": 2} if num_workers else {}
    return {"num_workers": num_workers, "collate_fn": collate, **extra}


@pytest.fixture(scope="module")
def shared_config(module_tier_config):
    """The tiers (hot 1 MiB, no warm) of one deployment the tests of this module share: each reads its
    own fresh objects, and what it asserts (orders and positions per dataset) does not depend on who else
    the node cache served."""
    return module_tier_config(hot="1MiB", warm=None)


@pytest.fixture
def dataset_factory(bucket, shared_config, module_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", COUNT, size=64)

    def make(**kwargs):
        kwargs.setdefault("batch_size", 1)
        return module_dataset(f"s3://{name}/ds", shared_config, layout="files", seed=0, **kwargs)
    return make


def full_epoch(make, epoch: int = 0, batch_size: int = 1) -> list[int]:
    dataset = make(batch_size=batch_size)
    dataset.set_epoch(epoch)
    return indices(DataLoader(dataset, batch_size=batch_size, **loader_kwargs(0)))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_plain_loader_resumes_exactly_after_five_batches(dataset_factory, num_workers):
    """B19: 5 batches, state, a new dataset and loader: the rest of the same order, no repeat, no gap."""
    expected = full_epoch(dataset_factory)
    dataset = dataset_factory()
    iterator = iter(DataLoader(dataset, batch_size=1, **loader_kwargs(num_workers)))
    head = indices(take(iterator, 5))
    # With workers, the main process cannot see what was prefetched but not consumed: say how many.
    state = dataset.state_dict() if num_workers == 0 else dataset.state_dict(batches_consumed=5)
    del iterator
    assert state["epoch"] == 0 and state["seed"] == 0 and state["position"] == 5
    resumed = dataset_factory()
    resumed.load_state_dict(json.loads(json.dumps(state)))  # a state survives JSON
    rest = indices(DataLoader(resumed, batch_size=1, **loader_kwargs(2 - num_workers)))
    assert head + rest == expected


def test_plain_loader_with_workers_refuses_to_guess_the_position(dataset_factory):
    from tierload.errors import ConfigError

    dataset = dataset_factory()
    iterator = iter(DataLoader(dataset, batch_size=1, **loader_kwargs(2)))
    take(iterator, 3)
    with pytest.raises(ConfigError, match="batches_consumed"):
        dataset.state_dict()


@pytest.mark.parametrize("num_workers, batch_size", [(0, 1), (2, 1), (2, 4)])
def test_stateful_dataloader_resumes_with_the_same_workers(dataset_factory, num_workers, batch_size):
    """B19 through torchdata: loader.state_dict() after k batches, a new loader loads it."""
    expected = full_epoch(dataset_factory, batch_size=batch_size)
    loader = StatefulDataLoader(dataset_factory(batch_size=batch_size), batch_size=batch_size,
                                **loader_kwargs(num_workers))
    iterator = iter(loader)
    head = indices(take(iterator, 5))
    state = loader.state_dict()
    del iterator
    again = StatefulDataLoader(dataset_factory(batch_size=batch_size), batch_size=batch_size,
                               **loader_kwargs(num_workers))
    again.load_state_dict(state)
    rest = indices(again)
    assert head + rest == expected


@pytest.mark.parametrize("before, after", [(2, 3), (3, 0)])
def test_stateful_loader_state_resumes_under_a_different_num_workers(dataset_factory, before, after):
    """The loader's per-worker states merge into one rank position; any num_workers continues it."""
    expected = full_epoch(dataset_factory, batch_size=4)
    loader = StatefulDataLoader(dataset_factory(batch_size=4), batch_size=4, **loader_kwargs(before))
    iterator = iter(loader)
    head = indices(take(iterator, 7))
    state = loader.state_dict()
    del iterator
    resumed = dataset_factory(batch_size=4)
    resumed.load_state_dict(state)
    rest = indices(DataLoader(resumed, batch_size=4, **loader_kwargs(after)))
    assert head + rest == expected


@pytest.mark.parametrize("persistent", [False, True])
def test_resume_point_is_used_once_then_every_epoch_is_whole(dataset_factory, persistent):
    """B20: resume at 40 of 100, finish the epoch, then epochs 1 and 2 yield all 100 each."""
    source = dataset_factory()
    iterator = iter(DataLoader(source, batch_size=1, **loader_kwargs(0)))
    head = indices(take(iterator, 40))
    state = source.state_dict()
    del iterator
    dataset = dataset_factory()
    dataset.load_state_dict(state)
    loader = DataLoader(dataset, batch_size=1, persistent_workers=persistent, **loader_kwargs(2))
    rest = indices(loader)
    assert len(rest) == 60 and sorted(head + rest) == list(range(COUNT))
    orders = []
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        got = indices(loader)
        assert sorted(got) == list(range(COUNT))
        orders.append(got)
    assert orders[0] != orders[1]  # persistent workers saw set_epoch
    again = indices(loader)  # the same epoch once more, no set_epoch: still whole
    assert again == orders[1]


def test_state_of_another_dataset_or_order_is_refused(dataset_factory):
    """Another rank or world size resumes (elastic: tests/test_elastic_resume.py); other contents or
    another order setting does not."""
    from tierload.errors import ConfigError

    state = dataset_factory().state_dict()
    other_order = dataset_factory(rank=1, world_size=2, drop_last=True)
    with pytest.raises(ConfigError, match="drop_last=False"):
        other_order.load_state_dict(state)
    with pytest.raises(ConfigError, match="different dataset contents"):
        dataset_factory().load_state_dict({**state, "dataset_id": "0" * 24})
    with pytest.raises(ConfigError, match="not a TieredDataset state"):
        dataset_factory().load_state_dict({"epoch": 1})


def test_a_new_process_resumes_from_a_checkpoint_with_other_workers_and_a_warm_cache(s3, ray_session, bucket,
                                                                                    tier_config, tmp_path):
    """Stop a job after k batches, start a new process from the checkpoint with another num_workers: the
    rest of the epoch is exactly the samples not yet seen, in order, and the restarted node cache adopts
    the hot tier's files (hot hits, no cold reads for them). The first process joins this session's Ray,
    whose node cache is detached and outlives it; the second process finds that live owner of the hot
    directory and joins it (issue 13), so the epoch's counters on that cache are both processes'."""
    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from demo_data import write_npy_dataset

    name, fs = bucket
    write_npy_dataset(fs, f"{name}/rows", 100, dim=4, files=2)
    config = tier_config(hot="1MiB", warm=None, manifest={"block_bytes": 16},  # one row per block
                         ray={"num_cpus": 1, "object_store_memory_bytes": "80MiB"})
    config_path = tmp_path / "tierload.yaml"
    config_path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    script = Path(__file__).resolve().parents[1] / "examples" / "train_loop.py"
    common = [sys.executable, str(script), "--url", f"s3://{name}/rows", "--config", str(config_path),
              "--storage-options", json.dumps(s3.storage_options), "--epochs", "2", "--batch-size", "4"]
    own_ray = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    joined = {**own_ray, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    outputs = []
    first = ["--num-workers", "2", "--stop-after", "5", "--save", str(tmp_path / "ckpt.pt"),
             "--record", str(tmp_path / "first.json")]
    second = ["--num-workers", "3", "--resume", str(tmp_path / "ckpt.pt"), "--record", str(tmp_path / "second.json")]
    for env, extra in ((joined, first), (own_ray, second)):
        done = subprocess.run(common + extra, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        outputs.append(done.stdout.strip())
    first = json.loads((tmp_path / "first.json").read_text())
    second = json.loads((tmp_path / "second.json").read_text())
    head, rest = first["ids"]["0"], second["ids"]["0"]
    assert len(head) == 20 and len(rest) == 80
    assert sorted(head + rest) == list(range(100))
    full = _epoch_rows(s3, name, config, epoch=0)
    assert head + rest == full  # exactly the unseen samples, in the uninterrupted order
    assert sorted(second["ids"]["1"]) == list(range(100))  # the next epoch is whole
    stats = second["stats"]["0"]
    print("\n$ python examples/train_loop.py --num-workers 2 --stop-after 5 --save ckpt.pt")
    print(outputs[0])
    print("$ python examples/train_loop.py --num-workers 3 --resume ckpt.pt")
    print(outputs[1])
    print(f"resumed epoch 0 in the new process: {stats['accesses']} block accesses, {stats['hot_hits']} hot hits, "
          f"{stats['cold_gets']} cold GETs")
    # Both processes' epoch-0 streams are on the one cache (the first's 20 samples and its prefetch, then
    # the second's 80): the second's samples are checked exactly above by their ids.
    assert stats["accesses"] >= 80 and stats["hot_hits"] >= 40
    assert stats["cold_gets"] <= stats["accesses"] - stats["hot_hits"]


def _epoch_rows(s3, name, config, epoch) -> list[int]:
    """The uninterrupted order of an epoch as the example's dataset (seed 7) yields it: row i holds id i
    (write_npy_dataset), and sample ids follow the manifest's row order."""
    from tierload.data.manifest_build import load_manifest
    from tierload.loader.dataset import TieredDataset
    from tierload.stores.cold.source import ColdSource

    dataset = TieredDataset(f"s3://{name}/rows", config, batch_size=4, seed=7, storage_options=s3.storage_options,
                            lazy=True)
    source = ColdSource(dataset._cold, dataset.config.cold)
    dataset._manifest = load_manifest(source, dataset.config.manifest, dataset.layout)  # no Ray needed
    return [int(i) for i in dataset.rank_order(epoch)]


def test_a_resumed_stream_neither_prefetches_nor_counts_what_was_consumed_before():
    """The node cache's plan of a resumed epoch starts at the resume point (unheard consumers included)."""
    import numpy as np

    from tierload.data.runs import NEVER
    from tierload.node.stream import Stream

    seq = np.arange(20, dtype=np.int32) % 10
    stream = Stream("s", "d", 0, seq, consume_len=20, num_consumers=2, num_blocks=10, start=12)
    assert stream.next_run == 12 and stream.cursor == 12  # neither consumer reported yet
    assert stream.distance(2) == 0 and stream.distance(3) == 1  # positions 12, 13
    assert stream.distance(1) == NEVER  # used at 1 and 11 only: both before the resume point
    stream.set_cursor(0, 15)
    assert stream.cursor == 12  # consumer 1 has not been heard from: it is at the start
