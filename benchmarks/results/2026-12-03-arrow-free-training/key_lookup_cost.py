"""CPU of what a training process reads of a mapped manifest per block, at 1.28 M blocks' manifest.

Opens the manifest cached by ``file_startup.py`` in WORKDIR and times, over 100,000 random block
indexes: the block's key (``block_key_at``, once per block read) and its member spans
(``pack_index.span``, once per block decoded). Run once with this tree and once with an older one
on ``PYTHONPATH`` (there the key column is a pyarrow array).

``python key_lookup_cost.py WORKDIR``
"""

from __future__ import annotations

import glob
import sys
import time

import numpy as np

from tierload.data.block_columns import block_key_at
from tierload.data.manifest import open_manifest


def main(workdir: str) -> None:
    (path,) = glob.glob(f"{workdir}/**/*.arrow", recursive=True)  # the one manifest cached there
    started = time.perf_counter()
    manifest = open_manifest(path)
    opened = time.perf_counter() - started
    blocks = manifest.blocks
    picks = np.random.default_rng(0).integers(0, len(blocks), 100_000).tolist()
    for name, call in (("key", lambda i: block_key_at(blocks, i)), ("spans", lambda i: manifest.pack_index.span(i))):
        for _ in range(2):  # the first pass touches the pages
            started = time.perf_counter()
            for index in picks:
                call(index)
            elapsed = time.perf_counter() - started
        print(f"{name}: {elapsed / len(picks) * 1e6:.2f} us per block ({len(blocks)} blocks)")
    print(f"open_manifest: {opened * 1e3:.1f} ms; pyarrow loaded: {'pyarrow' in sys.modules}")


if __name__ == "__main__":
    main(sys.argv[1])
