"""Measures what a forked DataLoader worker copies of a mapped manifest it walks.

Run as ``python -m manifest_walk_probe <dir> <pack_target_bytes>`` by
``tests/test_manifest_sharing.py``: in a fresh interpreter, the parent's heap is what the probe
built, not what earlier tests of the same pytest worker left there (a forked child's full
collections write to every tracked object's header, so a larger parent heap reads as growth).
Prints the growth of each worker, in MB, as JSON.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import numpy as np
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from tierload.data.layouts.objects import plan_objects
from tierload.data.manifest import Manifest, open_manifest
from tierload.data.manifest_arrow import save_manifest
from tierload.stores.cold.object_info import ObjectInfo

KEYS = 200_000
# The target: a worker grows < 50 MB over 2 epochs at 2 M keys, i.e. 25 bytes per key.
BOUND_MB = 25 * KEYS / 1e6


def _private_dirty_mb() -> float:
    """MB of anonymous memory this process alone has written (heap, arenas): where copy-on-read lands.

    File-backed mappings are left out: the mapped manifest's pages are the page cache's, and a
    file written moments ago shows its not yet written-back pages as dirty in whoever maps them.
    """
    total_kb, anonymous = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if fields[0].endswith(":"):
                if anonymous and fields[0] == "Private_Dirty:":
                    total_kb += int(fields[1])
            else:  # a mapping's header: address perms offset dev inode [path]
                anonymous = len(fields) < 6 or fields[5].startswith("[")
    return total_kb / 1024


class _Walk(IterableDataset):
    """Each worker walks its half of a fixed order twice (two epochs) without reading bytes and
    yields ``(private dirty MB before, after)``."""

    def __init__(self, manifest: Manifest, order: np.ndarray) -> None:
        self.manifest = manifest
        self.order = order

    def __iter__(self):
        info = get_worker_info()
        mine = self.order[info.id::info.num_workers]  # a view: the walk itself allocates nothing that lasts
        self._walk(mine[:100])  # the walk's own transient objects, and the allocator pages they land in
        gc.collect()
        before = _private_dirty_mb()
        touched = sum(self._walk(mine) for _epoch in range(2))
        yield before, _private_dirty_mb(), touched

    def _walk(self, samples: np.ndarray) -> int:
        """Look each sample up as EpochReader does: its block's key, its index in the block, its label."""
        manifest = self.manifest
        blocks, sample_block, sample_index, labels = (manifest.blocks, manifest.sample_block, manifest.sample_index,
                                                      manifest.labels)
        touched = 0
        for position in range(len(samples)):
            sample = int(samples[position])
            block = blocks[int(sample_block[sample])]
            touched += len(block.key) > 0 and int(sample_index[sample]) >= 0 and int(labels[sample]) >= -1
        gc.collect()  # the collector visits every tracked object too, as it would in a long job
        return touched


def worker_growth_mb(tmp_path: Path, pack_target_bytes: int) -> list[float]:
    objects = [ObjectInfo(f"s3://b/d/{i % 1000:04d}/{i:07d}.jpg", 1024, f'"{i:032x}"') for i in range(KEYS)]
    plan = plan_objects("s3://b/d", objects, extensions=None, skip_empty=False, pack_threshold_bytes=2**20,
                        pack_target_bytes=pack_target_bytes, pack_order="mixed")
    del objects
    path = tmp_path / f"m-{pack_target_bytes}.arrow"
    save_manifest(Manifest("s3://b/d", "files", plan.blocks, plan.sample_block, plan.sample_index, plan.labels,
                           plan.classes), path)
    del plan
    manifest = open_manifest(path)  # as TieredDataset holds it when the DataLoader forks
    _ = manifest.dataset_id  # computed in the parent, as start() does
    order = np.random.default_rng(0).permutation(KEYS)
    gc.collect()
    loader = DataLoader(_Walk(manifest, order), batch_size=None, num_workers=2, multiprocessing_context="fork")
    results = list(loader)
    assert sum(touched for _, _, touched in results) == 2 * KEYS  # every sample looked up once per epoch
    return [after - before for before, after, _ in results]


if __name__ == "__main__":
    print(json.dumps(worker_growth_mb(Path(sys.argv[1]), int(sys.argv[2]))))
