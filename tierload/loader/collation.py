"""Batching the sample types tierload yields: ``DataLoader(dataset, collate_fn=tierload.collate)``.

A batch is a list of ``(sample, label)`` pairs; :func:`collate` returns ``(samples, labels)``:

* tensors of one shape and dtype are stacked into one tensor (images, ``.npy`` rows, numeric
  Parquet lists); tensors of different shapes (images of mixed sizes) stay a list;
* dicts (Parquet rows, WebDataset samples) are collated key by key, so a batch of rows becomes
  a dict of columns; tuples of one length (the ``tokens`` layout's ``(input, target)`` pairs)
  field by field, so a batch of pairs becomes a pair of batches;
* ints, floats and bools become a tensor; ``bytes`` (raw files), ``str``, ``None`` and other
  objects stay a list;
* labels become an int64 tensor (-1 where unknown).

Unlike ``torch.utils.data.default_collate`` it never fails on mixed image sizes, on ``None``
in a nullable column, or on a key missing from some WebDataset samples (a missing value is
``None`` in the list).

In a DataLoader worker, every CPU tensor of the batch (samples, labels, a mixture's sources,
each field of a dict) is placed in ONE shared-memory storage. torch hands a batch to the
training process storage by storage, and with its default ``file_descriptor`` sharing each
storage costs a connection and an authentication handshake in both processes
(``torch.multiprocessing.reductions.rebuild_storage_fd``); a tensor built in an ordinary storage
is also copied into shared memory when it is sent. With one storage a batch costs one handshake.
Measured on 2 cores under load, 32,752 token windows of 2,049 tokens from local files, batches of
8, 2 workers, the second epoch (every read a hot hit), three runs each, alternated: 2,789-3,637
windows/s with a storage per tensor, 6,236-8,176 with one per batch.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import get_worker_info

_MISSING = None


def collate_values(values: Sequence[Any]) -> Any:
    """Collate one field across a batch (see the module docstring for the rules)."""
    if not values:
        return []
    first = values[0]
    if all(isinstance(v, torch.Tensor) for v in values):
        if all(v.shape == first.shape and v.dtype == first.dtype and v.device == first.device for v in values):
            return torch.stack(list(values))
        return list(values)
    if all(isinstance(v, np.ndarray) for v in values):
        return collate_values([torch.from_numpy(np.ascontiguousarray(v)) for v in values])
    if all(isinstance(v, bool) for v in values):
        return torch.tensor(values, dtype=torch.bool)
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
        return torch.tensor([int(v) for v in values], dtype=torch.int64)
    if all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        return torch.tensor([float(v) for v in values], dtype=torch.float64)
    if all(isinstance(v, tuple) and len(v) == len(first) for v in values):  # (input, target) token pairs
        return tuple(collate_values(list(field)) for field in zip(*values, strict=True))
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(key for v in values for key in v))
        return {key: collate_values([v.get(key, _MISSING) for v in values]) for key in keys}
    return list(values)


def collate(batch: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Turn a list of ``(sample, label)`` pairs into ``(samples, labels)``.

    Args:
        batch: What a DataLoader hands to ``collate_fn``: ``[(sample, label), ...]``, or a
            mixture's ``[(sample, label, source), ...]``.

    Returns:
        ``(samples, labels)``: samples collated by :func:`collate_values`; labels an int64
        tensor of shape (batch,); a mixture's batch adds ``sources``, int64 (batch,). In a
        DataLoader worker its tensors share one storage in shared memory (:func:`in_one_shared_storage`).
    """
    samples = [item[0] for item in batch]
    labels = torch.tensor([int(item[1]) for item in batch], dtype=torch.int64)
    if batch and len(batch[0]) == 3:  # a mixture's (sample, label, source)
        out: tuple[Any, ...] = (collate_values(samples), labels,
                                torch.tensor([int(item[2]) for item in batch], dtype=torch.int64))
    else:
        out = (collate_values(samples), labels)
    return in_one_shared_storage(out) if get_worker_info() is not None else out


# Byte alignment of each tensor in a batch's shared storage: a multiple of every dtype's size.
_ALIGN_BYTES = 64


def in_one_shared_storage(batch: Any) -> Any:
    """The same batch with every CPU tensor in it copied into one shared-memory storage.

    Args:
        batch: A collated batch: tensors, possibly inside tuples, lists and dicts.

    Returns:
        The batch with the same structure, shapes and dtypes; its CPU tensors (contiguous views
        into one ``torch.UntypedStorage`` in shared memory) travel to the training process in one
        piece (see the module docstring). A batch with fewer than two CPU tensors is returned as is.
    """
    tensors = list({id(t): t for t in _tensors_in(batch) if t.device.type == "cpu"}.values())
    if len(tensors) < 2:
        return batch
    offsets, total = [], 0
    for tensor in tensors:
        total = -(-total // _ALIGN_BYTES) * _ALIGN_BYTES
        offsets.append(total)
        total += tensor.numel() * tensor.element_size()
    arena = torch.UntypedStorage._new_shared(max(total, 1))
    moved: dict[int, torch.Tensor] = {}
    for tensor, offset in zip(tensors, offsets, strict=True):
        view = torch.empty(0, dtype=tensor.dtype).set_(arena, offset // tensor.element_size(), tensor.shape,
                                                         _contiguous_strides(tensor.shape))
        view.copy_(tensor)
        moved[id(tensor)] = view
    return _replace_tensors(batch, moved)


def _contiguous_strides(shape: torch.Size) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors_in(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors_in(item)]
    return []


def _replace_tensors(value: Any, moved: dict[int, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return moved.get(id(value), value)
    if isinstance(value, tuple):
        return tuple(_replace_tensors(item, moved) for item in value)
    if isinstance(value, list):
        return [_replace_tensors(item, moved) for item in value]
    if isinstance(value, dict):
        return {key: _replace_tensors(item, moved) for key, item in value.items()}
    return value
