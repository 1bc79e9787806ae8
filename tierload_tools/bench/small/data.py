"""The small-object datasets, generated once and cached (issue 11, item 5).

* :func:`files_tree`: ``count`` files of ``size`` random bytes in ``classes`` class folders
  (``<root>/<class:04d>/<n:08d>.bin``) on local disk, read as a ``file://`` cold tier.
* :func:`stored_bucket`: the same objects as a stored bucket the emulated S3 serves itself
  (see :mod:`tierload_tools.bench.own_buckets`), keys ``<prefix>/<class:04d>/<n:08d>.bin``.

Object ``n`` is in class ``n % classes``; its bytes come from a seeded generator, so both are
reproducible. A tree is complete once the marker file beside it exists, a bucket once its index does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np

from tierload_tools.bench.own_buckets import is_stored_bucket, write_stored_bucket

DEFAULT_CACHE = Path("~/.cache/tierload/bench")
_MARKER = ".complete"
_CHUNK = 4096
# What each contender of small-files starts with: the dataset's files out of the page cache, or all in it.
PAGE_CACHE_STATES = ("cold", "warm")


def cache_root(cache_dir: str | os.PathLike | None) -> Path:
    """Where generated data is kept (default ``~/.cache/tierload/bench``)."""
    return Path(cache_dir or DEFAULT_CACHE).expanduser()


def _bodies(count: int, size: int, seed: int) -> Iterator[bytes]:
    for start in range(0, count, _CHUNK):
        rows = min(_CHUNK, count - start)
        block = np.random.default_rng([seed, start]).integers(0, 256, (rows, size), dtype=np.uint8)
        yield from (row.tobytes() for row in block)


def relative_key(n: int, classes: int) -> str:
    """``<class:04d>/<n:08d>.bin``: where object ``n`` lives below the dataset prefix."""
    return f"{n % classes:04d}/{n:08d}.bin"


def files_tree(count: int, size: int, classes: int, cache_dir: str | os.PathLike | None = None,
               seed: int = 0) -> Path:
    """The ``file://`` dataset's root directory, written on first use.

    Args:
        count: Files.
        size: Bytes per file.
        classes: Class folders (file ``n`` goes to folder ``n % classes``).
        cache_dir: Parent of the tree (default ``~/.cache/tierload/bench``).
        seed: Seed of the bytes.
    """
    root = cache_root(cache_dir) / f"small-files-{count}x{size}-c{classes}-s{seed}"
    marker = root.with_name(root.name + _MARKER)  # beside the tree: inside it would be listed as a sample
    if marker.exists():
        return root
    for cls in range(classes):
        (root / f"{cls:04d}").mkdir(parents=True, exist_ok=True)
    for n, body in enumerate(_bodies(count, size, seed)):
        with open(root / relative_key(n, classes), "wb") as out:
            out.write(body)
    marker.write_text("", encoding="utf-8")
    return root


def _files_below(root: str | os.PathLike) -> Iterator[str]:
    pending = [os.fspath(root)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield entry.path


def set_page_cache(root: str | os.PathLike, state: str) -> int:
    """Put every file below ``root`` in the page cache (``warm``: each read once) or out of it
    (``cold``: ``posix_fadvise(DONTNEED)``).

    Why: the contenders run one after the other over the same files; without this the first
    reads them from the disk and the next from the page cache. Only this tree's pages are
    dropped (``/proc/sys/vm/drop_caches`` would empty the cache of everything else on the
    machine). Directory entries and inodes stay cached for both alike.

    Args:
        root: The tree.
        state: ``cold`` or ``warm``.

    Returns:
        Files touched.

    Raises:
        ValueError: Another ``state``.
    """
    if state not in PAGE_CACHE_STATES:
        raise ValueError(f"page cache state {state!r}; choose one of {', '.join(PAGE_CACHE_STATES)}")
    touched = 0
    for path in _files_below(root):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            if state == "cold":
                os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            else:
                while os.read(descriptor, 1 << 20):
                    pass
        finally:
            os.close(descriptor)
        touched += 1
    return touched


def stored_bucket(count: int, size: int, classes: int, prefix: str, cache_dir: str | os.PathLike | None = None,
                  seed: int = 0) -> Path:
    """A stored bucket of the objects (keys ``<prefix>/<class>/<n>.bin``), written on first use."""
    directory = cache_root(cache_dir) / f"small-s3-{count}x{size}-c{classes}-s{seed}-{prefix}"
    if not is_stored_bucket(directory):
        pairs = ((f"{prefix}/{relative_key(n, classes)}", body) for n, body in enumerate(_bodies(count, size, seed)))
        write_stored_bucket(directory, pairs)
    return directory
