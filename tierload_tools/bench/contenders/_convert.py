"""Helpers shared by the contenders that convert the dataset first (Streaming, LitData).

A conversion reads every source image from the emulated S3 (16 GETs in flight, so it runs at
the link's speed, as a careful user's conversion job would) and writes the peer's shard
format back to the same S3. Shards are sized to a sixteenth of the hot capacity (1-64 MiB),
so the peer's cache holds about 16 of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from tierload_tools.bench.contenders import Context
from tierload_tools.bench.workload import decode_jpeg

MIB = 2**20


def shard_bytes(ctx: Context) -> int:
    return int(min(64 * MIB, max(1 * MIB, ctx.hot_bytes // 16)))


def read_sources(ctx: Context, indices: list[int] | None = None, threads: int = 16) -> Iterator[tuple[bytes, int]]:
    """``(jpeg bytes, label)`` of the dataset's samples, in order, fetched ``threads`` at a time."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **ctx.s3fs_options)
    dataset = ctx.dataset
    indices = list(range(len(dataset.keys))) if indices is None else indices
    paths = [f"{dataset.bucket}/{dataset.keys[i]}" for i in indices]
    with ThreadPoolExecutor(threads) as pool:
        for index, data in zip(indices, pool.map(fs.cat_file, paths), strict=True):
            yield data, dataset.labels[index]


class DecodedItems:
    """Mixin for a peer's streaming dataset whose items are ``{"image": JPEG bytes, "label": int}``
    (what :func:`read_sources` feeds the converters): yields ``(uint8 (3, H, W) tensor, label)``."""

    def __getitem__(self, index):
        item = super().__getitem__(index)  # type: ignore[misc]  # a mixin: the peer's class is next in the MRO
        return decode_jpeg(item["image"]), int(item["label"])
