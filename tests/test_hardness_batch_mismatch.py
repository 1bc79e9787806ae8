"""A DataLoader whose batch size differs from ``TieredDataset(batch_size=...)`` (issue 26, item 2; case N01).

``TieredDataset(batch_size=16)`` inside ``DataLoader(batch_size=32)``, resumed mid-epoch with
``state_dict(batches_consumed=k)``, used to deliver ``k * 16`` samples twice: the state counted the
dataset's batches, the loop the loader's. Either the resumed epoch delivers every sample exactly
once, or the mismatch is refused before any sample is yielded with an error naming both values.

Real moto S3 over HTTP, a real local Ray, real DataLoaders (0 and 2 worker processes); nothing mocked.
"""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload import collate
from tierload.errors import ConfigError

COUNT = 200
DATASET_BATCH, LOADER_BATCH, CONSUMED = 16, 32, 5


@pytest.fixture(scope="module")
def shared_config(module_tier_config):
    """The tiers (hot 1 MiB, no warm) of one deployment the tests of this module share: each reads its
    own fresh objects, and what it asserts (what one dataset delivered) does not depend on who else the
    node cache served."""
    return module_tier_config(hot="1MiB", warm=None)


@pytest.fixture
def make(bucket, shared_config, module_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", COUNT, size=64)
    return lambda **kwargs: module_dataset(f"s3://{name}/ds", shared_config, layout="files", seed=0, **kwargs)


def ids(batch) -> list[int]:
    samples, _labels = batch
    return [index_of(sample) for sample in samples]


def loader(dataset, batch_size: int, num_workers: int) -> DataLoader:
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate)


@pytest.mark.parametrize("dataset_batch, loader_batch", [(DATASET_BATCH, LOADER_BATCH), (LOADER_BATCH, DATASET_BATCH)],
                         ids=["loader larger", "loader smaller"])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_loader_batch_other_than_the_datasets_never_duplicates_samples_on_resume(make, num_workers, dataset_batch,
                                                                                   loader_batch):
    delivered: Counter = Counter()
    dataset = make(batch_size=dataset_batch)
    try:
        iterator = iter(loader(dataset, loader_batch, num_workers))
        for _ in range(CONSUMED):
            delivered.update(ids(next(iterator)))
        state = dataset.state_dict(batches_consumed=CONSUMED)
        del iterator
        resumed = make(batch_size=dataset_batch)
        resumed.load_state_dict(state)
        for batch in loader(resumed, loader_batch, num_workers):
            delivered.update(ids(batch))
    except ConfigError as exc:  # refused: before any sample was delivered, naming both sizes
        assert not delivered, f"refused only after {sum(delivered.values())} samples"
        assert f"batch_size={dataset_batch}" in str(exc) and f"batch_size={loader_batch}" in str(exc)
        return
    twice = sorted(i for i, n in delivered.items() if n > 1)
    assert sum(delivered.values()) == COUNT and not twice, (
        f"{sum(delivered.values())} samples delivered for {COUNT}, {len(twice)} of them more than once")
    assert set(delivered) == set(range(COUNT))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_equal_batch_sizes_still_resume_exactly(make, num_workers):
    delivered: Counter = Counter()
    dataset = make(batch_size=LOADER_BATCH)
    iterator = iter(loader(dataset, LOADER_BATCH, num_workers))
    for _ in range(CONSUMED - 2):
        delivered.update(ids(next(iterator)))
    state = dataset.state_dict(batches_consumed=CONSUMED - 2)
    del iterator
    resumed = make(batch_size=LOADER_BATCH)
    resumed.load_state_dict(state)
    for batch in loader(resumed, LOADER_BATCH, num_workers):
        delivered.update(ids(batch))
    assert sorted(delivered.elements()) == list(range(COUNT))


def test_iterating_the_dataset_directly_or_with_an_unbatched_loader_is_not_refused(make):
    dataset = make(batch_size=DATASET_BATCH, shuffle=False)
    direct = [index_of(sample) for sample, _label in dataset]
    unbatched = [index_of(sample) for sample, _label in DataLoader(dataset, batch_size=None)]
    assert sorted(direct) == sorted(unbatched) == list(range(COUNT))


@pytest.mark.parametrize("before, after", [(2, 0)])
def test_a_stateful_loader_state_with_the_mismatch_resumed_under_other_workers(make, before, after):
    """torchdata's loader state merged into the dataset (the documented way to change num_workers).

    Exact on the old code too (a guard, not a reproduction): the refusal must not turn it into a loss."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    delivered: Counter = Counter()
    try:
        first = stateful.StatefulDataLoader(make(batch_size=DATASET_BATCH), batch_size=LOADER_BATCH,
                                            num_workers=before, collate_fn=collate)
        iterator = iter(first)
        for _ in range(CONSUMED):
            delivered.update(ids(next(iterator)))
        state = first.state_dict()
        del iterator
        resumed = make(batch_size=DATASET_BATCH)
        resumed.load_state_dict(state)
        for batch in loader(resumed, LOADER_BATCH, after):
            delivered.update(ids(batch))
    except ConfigError as exc:
        assert not delivered and f"batch_size={LOADER_BATCH}" in str(exc)
        return
    missing = sorted(set(range(COUNT)) - set(delivered))
    twice = sorted(i for i, n in delivered.items() if n > 1)
    assert not missing and not twice, f"{len(missing)} samples never delivered, {len(twice)} more than once"
