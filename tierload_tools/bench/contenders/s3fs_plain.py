"""Contender: a plain DataLoader over a map-style dataset that GETs each sample with s3fs.

What most users write first: ``fs.cat_file(path)`` in ``__getitem__``, a shuffling sampler,
``num_workers`` processes, each with its own s3fs client. Every epoch reads every byte again.
"""

from __future__ import annotations

import time

from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from tierload_tools.bench.contenders import Context, in_worker_fs, sampler_generator
from tierload_tools.bench.loop import run_epochs
from tierload_tools.bench.workload import decode_jpeg


class S3Images(TorchDataset):
    """Sample ``i``: GET ``bucket/keys[i]`` through ``open_bytes`` and decode it."""

    def __init__(self, ctx: Context, cache_storage: str | None = None) -> None:
        self.paths = [f"{ctx.dataset.bucket}/{key}" for key in ctx.dataset.keys]
        self.labels = ctx.dataset.labels
        self.options = ctx.s3fs_options
        self.cache_storage = cache_storage
        self._fs: dict = {}

    def _make_fs(self):
        import fsspec

        if self.cache_storage is None:
            return fsspec.filesystem("s3", skip_instance_cache=True, **self.options)
        return fsspec.filesystem("simplecache", target_protocol="s3", target_options=self.options,
                                 cache_storage=self.cache_storage, skip_instance_cache=True)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        fs = in_worker_fs(self._fs, self._make_fs)
        if self.cache_storage is None:
            data = fs.cat_file(self.paths[index])
        else:
            with fs.open(self.paths[index], "rb") as file:
                data = file.read()
        return decode_jpeg(data), self.labels[index]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fs"] = {}
        return state


def loaders(ctx: Context, dataset: TorchDataset):
    workload = ctx.workload

    def for_epoch(epoch: int) -> DataLoader:
        return DataLoader(dataset, batch_size=workload.batch_size, shuffle=True, num_workers=workload.num_workers,
                          generator=sampler_generator(workload.seed, epoch))
    return for_epoch


def run(ctx: Context) -> dict:
    started = time.perf_counter()
    dataset = S3Images(ctx)
    setup_s = time.perf_counter() - started
    return {"setup_s": setup_s, "epochs": run_epochs(ctx.workload, ctx.dataset, ctx.endpoint_url,
                                                     loaders(ctx, dataset))}
