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

import json
import os
import platform
import subprocess
import sys

import pytest
from manifest_walk_probe import BOUND_MB, KEYS


def _worker_growth_mb(tmp_path, pack_target_bytes: int) -> list[float]:
    """Each worker's growth, measured in a fresh interpreter (see :mod:`manifest_walk_probe`)."""
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))}
    probe = subprocess.run([sys.executable, "-m", "manifest_walk_probe", str(tmp_path), str(pack_target_bytes)],
                           capture_output=True, text=True, check=True, env=env)
    return json.loads(probe.stdout.strip().splitlines()[-1])


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
    # The epoch's arrays (16 MB order, 8 MB gather) freed: what the heap grew for them stays, and
    # leaves with mapped allocations. The rest of the growth (~26-29 MB here) is the child's
    # copy-on-write of the parent's pages it wrote to (the parent's free heap reused in place).
    # How much the heap must grow depends on the free space the parent left: 8.7 MB (glibc's
    # mallinfo2 arena growth, equal to the USS difference) in a process that never imported
    # pyarrow, 11.6 MB in one that did (stable to 0.1 MB over runs).
    assert kept["heap"] - kept["mapped"] > 5, kept
