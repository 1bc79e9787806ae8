"""DataLoader workers share the mapped manifest without copying it (issue 11, item 3).

A forked worker that reads a Python object writes its reference count, so a page of the
parent's heap that holds per-sample objects becomes the worker's own (copy-on-read). The
columnar manifest has no Python object per packed sample: walking every sample the way
:class:`tierload.loader.epoch_reader.EpochReader` does (its block's key, its index in the block, its
label) must leave a worker's private dirty anonymous memory (``Private_Dirty`` in ``/proc/self/smaps``)
nearly where it was. The same walk over one block per object (packing off, a ``Block`` and its
strings per sample) is the control: it shows the measurement sees copy-on-read when there is some.

Real things only: real forked DataLoader workers, a real mapped Arrow file.
"""

from __future__ import annotations

import gc
import platform
import subprocess
import sys

import numpy as np
import pytest
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from tierload.data.layouts.objects import plan_objects
from tierload.data.manifest import Manifest, open_manifest, save_manifest
from tierload.stores.cold.listing import ObjectInfo

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


def _worker_growth_mb(tmp_path, pack_target_bytes: int) -> list[float]:
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


def test_forked_workers_walk_a_packed_manifest_without_copying_it(tmp_path):
    growth = _worker_growth_mb(tmp_path, 8 * 2**20)  # the default pack target
    print(f"\nworker private dirty growth over 2 walks of {KEYS} samples, packs: {[round(g, 1) for g in growth]} MB")
    assert max(growth) < BOUND_MB


@pytest.mark.slow  # validates the measurement, not the library: run with -m slow after changing the walk
def test_the_walk_sees_copy_on_read_of_a_block_per_sample(tmp_path):
    """The control: one ``Block`` (and its strings) per sample, the manifest the issue measured
    (and still what packing off gives), is copied into each worker: the walk can see it. Should
    plain blocks become columns too, build the per-sample objects here on purpose instead."""
    growth = _worker_growth_mb(tmp_path, 0)
    print(f"\nworker private dirty growth over 2 walks of {KEYS} samples, no packs: {[round(g, 1) for g in growth]} MB")
    assert min(growth) > BOUND_MB


HEAP_PROBE = """
import os, sys, numpy as np, psutil
from tierload.data.order import epoch_order, worker_positions
from tierload.process_memory import map_large_allocations
for _ in range(3):  # a manifest build's large temporaries, freed: glibc raises its mmap threshold
    big = np.ones(4_000_000); del big
sample_block = np.repeat(np.arange(27_000, dtype=np.int32), 75)[:2_000_000]
read, write = os.pipe()
if os.fork() == 0:  # a forked DataLoader worker: walks one epoch of 2 M samples, then measures
    if sys.argv[1] == "mapped":
        assert map_large_allocations()
    process = psutil.Process()
    before = process.memory_full_info().uss
    order = epoch_order(sample_block, seed=0, epoch=0, shuffle="sample")
    positions = worker_positions(len(order), worker_id=0, num_workers=2, chunk=256)
    int(order[positions].sum())
    del order, positions
    os.write(write, str((process.memory_full_info().uss - before) / 2**20).encode())
    os._exit(0)
os.close(write)
print(os.read(read, 64).decode())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_a_workers_epoch_arrays_leave_with_the_epoch():
    """In a process whose heap threshold a manifest build raised (a forked DataLoader worker's
    inherited state), an epoch's 16 MB array stays in RSS after it is freed, unless the worker
    maps large allocations (what EpochReader does in a worker). Each case runs in a fresh
    interpreter, which imports numpy and psutil only (no pandas: importing it changes the heap)."""
    kept = {mode: float(subprocess.run([sys.executable, "-c", HEAP_PROBE, mode], capture_output=True, text=True,
                                       check=True).stdout) for mode in ("heap", "mapped")}
    # The epoch's arrays (16 MB order, 8 MB gather) freed: their pages stay on the heap, and
    # leave with mapped allocations. The rest of the growth (~22 MB here) is the child's
    # copy-on-write of the parent's pages it wrote to, the same in both.
    assert kept["heap"] - kept["mapped"] > 10, kept
