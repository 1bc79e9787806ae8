"""What the real-world failure case tests (tests/test_cases*.py) share: reading a dataset's
sample indices through a DataLoader, and storage options that go through a proxy."""

from __future__ import annotations

import torch
from helpers import index_of
from torch.utils.data import DataLoader


def collect_raw(batch):
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def indices(dataset, num_workers=0, batch_size=None, **kwargs):
    """Every sample's index in one epoch, read through a DataLoader batching as the dataset does
    (the dataset's batch_size, or 4 when it has none)."""
    batch_size = batch_size or getattr(dataset, "batch_size", None) or 4
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collect_raw, **kwargs)
    return [index_of(sample) for samples, _ in loader for sample in samples]


def proxied(s3, proxy, **extra):
    return {**s3.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"},
            **extra}
