"""Megatron-LM indexed datasets and token dtypes from the file (issue 23 items 1 and 5): an int32
``.idx`` (Megatron's dtype for vocabularies over 65,535) and a uint16 one side by side, several
documents each, windows checked against numpy's reading of the ``.bin`` files; a big-endian uint32
``.npy``; an index whose pointers do not lie back to back, or a multimodal one (its trailing mode
array), refused with the reason. Indexes are written byte by byte from the documented layout.
Real files (file://); no Ray needed.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from test_layout_tokens import SEQ_LEN, WIDTH, manifest_and_windows, npy_bytes, write

from tierload.errors import ManifestError

CODES = {"<u2": 8, "<i4": 4}  # Megatron-LM's DType codes: uint16 8, int32 4


def megatron(documents: list[np.ndarray], dtype: str, pointers: np.ndarray | None = None,
             modes: bool = False) -> tuple[bytes, bytes]:
    """``(.bin, .idx)``: magic, version 1, dtype code, sequence count, document count, sizes int32[],
    pointers int64[], document indices int64[] (and, for a multimodal index, modes int8[])."""
    sizes = np.array([len(doc) for doc in documents], dtype="<i4")
    if pointers is None:
        pointers = np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64))) * np.dtype(dtype).itemsize
    doc_idx = np.arange(len(documents) + 1, dtype="<i8")
    index = (b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, CODES[dtype], len(documents), len(doc_idx))
             + sizes.tobytes() + pointers.astype("<i8").tobytes() + doc_idx.tobytes()
             + (bytes(len(documents)) if modes else b""))
    return np.concatenate(documents).astype(dtype).tobytes(), index


def test_int32_and_uint16_indexes_and_a_big_endian_npy(tmp_path):
    rng = np.random.default_rng(0)
    big = [rng.integers(0, 200_000, size=n) for n in (5, 40, 17)]  # ids beyond uint16
    small = [rng.integers(0, 65_535, size=n) for n in (30, 3)]
    a_bin, a_idx = megatron(big, "<i4")
    b_bin, b_idx = megatron(small, "<u2")
    c = rng.integers(0, 2**32 - 1, size=45, dtype=np.uint64).astype(">u4")
    folder = write(tmp_path / "corpus", {"a.bin": a_bin, "a.idx": a_idx, "b.bin": b_bin, "b.idx": b_idx,
                                         "c.npy": npy_bytes(c)})
    stream = np.concatenate([np.fromfile(folder / "a.bin", dtype="<i4"), np.fromfile(folder / "b.bin", dtype="<u2"),
                             np.load(folder / "c.npy")]).astype(np.int64)
    assert len(stream) == 62 + 33 + 45 and stream.max() > 2**16
    manifest, windows = manifest_and_windows(folder, tmp_path)
    expected = stream[:len(stream) // WIDTH * WIDTH].reshape(-1, WIDTH)
    assert np.array_equal(torch.stack(windows).numpy(), expected)
    assert [f["descr"] for f in manifest.extra["files"]] == ["<i4", "<u2", ">u4"]
    assert manifest.extra["tail_tokens"] == len(stream) % WIDTH and SEQ_LEN + 1 == WIDTH


@pytest.mark.parametrize("broken, match", [
    ("pointers", "do not lie back to back"),
    ("modes", "multimodal index .3 sequence modes"),
])
def test_indexes_that_are_not_plain_token_sequences_are_refused(tmp_path, broken, match):
    documents = [np.arange(20), np.arange(20, 50), np.arange(50, 60)]
    pointers = np.array([0, 40, 200]) if broken == "pointers" else None
    data, index = megatron(documents, "<u2", pointers=pointers, modes=broken == "modes")
    folder = write(tmp_path / "corpus", {"x.bin": data, "x.idx": index})
    with pytest.raises(ManifestError, match=match):
        manifest_and_windows(folder, tmp_path)
