"""tierload.collate in a DataLoader worker: a batch's tensors travel in one shared storage.

Each storage torch sends from a worker costs a connection and a handshake in both processes
(``file_descriptor`` sharing), so a batch of token windows with its labels paid two; the batch now
arrives as views of one storage, with the same values, shapes and dtypes as collated in-process.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from tierload import collate
from tierload.loader.collation import in_one_shared_storage


class _Samples(Dataset):
    """Index-determined samples of the kinds the layouts yield."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int):
        if self.kind == "window":  # tokens: an int64 window, label -1
            return torch.arange(index, index + 9, dtype=torch.int64), -1
        if self.kind == "pair":  # tokens with token_output=pair
            window = torch.arange(index, index + 9, dtype=torch.int64)
            return (window[:-1], window[1:]), -1
        if self.kind == "mixture":  # (sample, label, source); float32 beside the int64 labels
            return torch.full((3, 5), float(index), dtype=torch.float32), index % 4, index % 2
        # a Parquet row: a dict of a uint8 image, a float and a string
        return {"image": torch.full((2, 3), index, dtype=torch.uint8), "score": index / 2, "text": f"r{index}"}, 1


def _storage_ptr(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _assert_same(got, want) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _assert_same(g, w)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _assert_same(got[key], want[key])
    else:
        assert got == want


def test_a_workers_batch_arrives_in_one_storage_with_the_in_process_values():
    for kind in ("window", "pair", "mixture", "row"):
        dataset = _Samples(kind)
        loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate)
        batches = list(loader)
        assert len(batches) == 3
        for number, batch in enumerate(batches):
            want = collate([dataset[i] for i in range(number * 4, number * 4 + 4)])  # in-process: no sharing
            _assert_same(batch, want)
            tensors = _tensors(batch)
            assert len(tensors) >= 2, kind
            assert len({_storage_ptr(t) for t in tensors}) == 1, f"{kind}: one storage per batch"
            assert all(t.is_shared() for t in tensors)


def test_in_process_batches_keep_their_own_storages():
    batch = collate([(torch.zeros(3), 0), (torch.ones(3), 1)])
    assert not batch[0].is_shared()
    assert _storage_ptr(batch[0]) != _storage_ptr(batch[1])


def test_packing_keeps_values_dtypes_and_alignment():
    odd = torch.arange(3, dtype=torch.uint8)  # 3 bytes: the next tensor must still be aligned
    wide = torch.arange(5, dtype=torch.float64).reshape(5, 1)
    strided = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()  # not contiguous
    packed = in_one_shared_storage({"a": odd, "b": [wide, strided], "c": "text", "d": np.int64(2)})
    assert packed["c"] == "text" and packed["d"] == 2
    for got, want in ((packed["a"], odd), (packed["b"][0], wide), (packed["b"][1], strided)):
        assert got.dtype == want.dtype and torch.equal(got, want)
        assert got.data_ptr() % 64 == 0
    assert len({_storage_ptr(t) for t in (packed["a"], *packed["b"])}) == 1
    lone = torch.ones(2)
    assert in_one_shared_storage((lone, "x"))[0] is lone  # one tensor: nothing to gain
