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
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
import torch

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
        tensor of shape (batch,); a mixture's batch adds ``sources``, int64 (batch,).
    """
    samples = [item[0] for item in batch]
    labels = torch.tensor([int(item[1]) for item in batch], dtype=torch.int64)
    if batch and len(batch[0]) == 3:  # a mixture's (sample, label, source)
        return collate_values(samples), labels, torch.tensor([int(item[2]) for item in batch], dtype=torch.int64)
    return collate_values(samples), labels
