"""Buckets the emulated S3 serves itself, without moto: a stored bucket and a synthetic one.

moto's server answers only a few hundred small GETs per second on a small machine, so a
small-object benchmark through it would measure moto. The emulated S3
(:mod:`tierload_tools.bench.emulated_s3`) answers the buckets named here from its own copy, with
the S3 semantics a client sees (:mod:`tierload_tools.bench.s3_answers`); every other bucket still
goes to moto.

* :class:`StoredBucket`: objects written once by :func:`write_stored_bucket` into a directory
  (``objects.bin``, every body back to back, and ``index.json``, keys and sizes); the
  emulator maps the file and answers from it. ETags are the MD5 of each body, as S3's are
  for single-part uploads.
* :class:`SyntheticBucket`: ``count`` keys of ``size`` bytes in ``classes`` class folders,
  generated on demand (no bytes stored anywhere): a listing of ImageNet scale without an
  upload. Bodies and ETags are deterministic per key; the ETag is the MD5 of the key, not
  of the body (as a multipart upload's ETag is not the body's MD5 either), so a listing of
  millions of large objects costs no hashing of their bodies.

Spec strings (one per ``--bucket`` of the emulator): ``NAME=stored:DIR`` or
``NAME=synthetic:COUNT:SIZE:CLASSES:PREFIX``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import os
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

INDEX_NAME = "index.json"
BLOB_NAME = "objects.bin"


class OwnBucket(Protocol):
    """What the emulator needs from a bucket it serves itself. Keys are sorted."""

    def __len__(self) -> int:
        """Number of objects."""

    def key(self, index: int) -> str:
        """Key of object ``index`` (in sorted order)."""

    def find(self, key: str) -> int | None:
        """Index of ``key``, or None if there is no such object."""

    def first_at_or_after(self, key: str) -> int:
        """Index of the first key ``>= key`` (``len(self)`` if none)."""

    def size(self, index: int) -> int:
        """Body size of object ``index`` in bytes."""

    def etag(self, index: int) -> str:
        """Quoted ETag of object ``index``, e.g. ``'"d41d8cd98f00b204e9800998ecf8427e"'``."""

    def body(self, index: int, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of object ``index``."""


class _SortedKeys:
    """Look-ups over ``self.keys``, a sorted list of object keys (what S3 lists in order)."""

    keys: list[str]

    def __len__(self) -> int:
        return len(self.keys)

    def key(self, index: int) -> str:
        return self.keys[index]

    def find(self, key: str) -> int | None:
        index = bisect.bisect_left(self.keys, key)
        return index if index < len(self.keys) and self.keys[index] == key else None

    def first_at_or_after(self, key: str) -> int:
        return bisect.bisect_left(self.keys, key)


class StoredBucket(_SortedKeys):
    """Objects stored by :func:`write_stored_bucket` in ``directory``, served from a memory map.

    Raises:
        FileNotFoundError: The directory holds no stored bucket.
        ValueError: The index does not match the blob's size.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        directory = Path(directory)
        index = json.loads((directory / INDEX_NAME).read_text(encoding="utf-8"))
        order = sorted(range(len(index["keys"])), key=index["keys"].__getitem__)
        self.keys = [index["keys"][i] for i in order]
        sizes = np.asarray(index["sizes"], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes
        self.sizes = sizes[order]
        self.offsets = offsets[order]
        with open(directory / BLOB_NAME, "rb") as blob:
            total = os.fstat(blob.fileno()).st_size
            if total != int(sizes.sum()):
                raise ValueError(f"{directory / BLOB_NAME} holds {total} bytes, its index says {int(sizes.sum())}")
            self._map = mmap.mmap(blob.fileno(), 0, access=mmap.ACCESS_READ) if total else b""
        self.etags = [f'"{hashlib.md5(self.body(i, 0, int(self.sizes[i]))).hexdigest()}"' for i in range(len(self))]

    def size(self, index: int) -> int:
        return int(self.sizes[index])

    def etag(self, index: int) -> str:
        return self.etags[index]

    def body(self, index: int, start: int, end: int) -> bytes:
        base = int(self.offsets[index])
        return bytes(self._map[base + start:base + end])


class SyntheticBucket(_SortedKeys):
    """``count`` objects of ``size`` bytes, keys ``PREFIX/<class:04d>/<n:08d>.bin``, made up.

    Object ``n`` is in class ``n % classes``. Its body is ``size`` bytes derived from its key;
    its ETag the MD5 of its key. The keys are held (sorted) in memory, ~100 bytes each.

    Raises:
        ValueError: A negative count or size, or ``classes < 1``.
    """

    def __init__(self, count: int, size: int, classes: int, prefix: str = "synthetic") -> None:
        if count < 0 or size < 0 or classes < 1:
            raise ValueError(f"synthetic bucket count={count}, size={size}, classes={classes}: need >= 0, >= 0, >= 1")
        self.object_size = size
        prefix = prefix.strip("/")
        # class-major, then n: the order S3 lists them in (zero-padded numbers sort as strings)
        self.keys = [f"{prefix}/{cls:04d}/{n:08d}.bin" for cls in range(classes) for n in range(cls, count, classes)]

    def size(self, index: int) -> int:
        return self.object_size

    def etag(self, index: int) -> str:
        return f'"{hashlib.md5(self.keys[index].encode()).hexdigest()}"'

    def body(self, index: int, start: int, end: int) -> bytes:
        seed = hashlib.sha256(self.keys[index].encode()).digest()
        return (seed * (self.object_size // len(seed) + 1))[start:end]


def write_stored_bucket(directory: str | os.PathLike, objects: Iterable[tuple[str, bytes]]) -> Path:
    """Write ``(key, body)`` pairs as a stored bucket in ``directory`` (atomically: index last).

    Returns:
        The directory.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    keys, sizes = [], []
    with open(directory / BLOB_NAME, "wb") as blob:
        for key, body in objects:
            keys.append(key)
            sizes.append(len(body))
            blob.write(body)
    tmp = directory / (INDEX_NAME + ".tmp")
    tmp.write_text(json.dumps({"keys": keys, "sizes": sizes}), encoding="utf-8")
    os.replace(tmp, directory / INDEX_NAME)
    return directory


def is_stored_bucket(directory: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a complete stored bucket."""
    return (Path(directory) / INDEX_NAME).is_file() and (Path(directory) / BLOB_NAME).is_file()


def parse_spec(spec: str) -> tuple[str, OwnBucket]:
    """``NAME=stored:DIR`` or ``NAME=synthetic:COUNT:SIZE:CLASSES:PREFIX`` -> ``(name, bucket)``.

    Raises:
        ValueError: The spec is malformed.
    """
    name, _, rest = spec.partition("=")
    kind, _, arguments = rest.partition(":")
    if not name or kind not in ("stored", "synthetic"):
        raise ValueError(f"bucket spec {spec!r}: use NAME=stored:DIR or NAME=synthetic:COUNT:SIZE:CLASSES:PREFIX")
    if kind == "stored":
        return name, StoredBucket(arguments)
    fields = arguments.split(":")
    if len(fields) != 4:
        raise ValueError(f"bucket spec {spec!r}: synthetic needs COUNT:SIZE:CLASSES:PREFIX")
    return name, SyntheticBucket(int(fields[0]), int(fields[1]), int(fields[2]), fields[3])
