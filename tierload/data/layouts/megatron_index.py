"""Megatron-LM indexed datasets: the ``.idx`` file that describes a ``.bin`` of tokens.

Megatron-LM (``megatron/core/datasets/indexed_dataset.py``) writes a corpus as a pair: ``x.bin``,
every sequence's tokens back to back, and ``x.idx``, little-endian:

====================  =====================================================================
``magic``             9 bytes, ``b"MMIDIDX\\x00\\x00"``
``version``           uint64, 1
``dtype code``        uint8: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
                      8 uint16 (the token dtype of the ``.bin``)
``sequence count``    uint64, N
``document count``    uint64, D (document boundaries, as indices into the sequences, 0 and N included)
``sizes``             int32[N]: tokens per sequence
``pointers``          int64[N]: byte offset of each sequence in the ``.bin``
``document indices``  int64[D]
``sequence modes``    int8[N], only in a multimodal index (refused: its ``.bin`` is not only tokens)
====================  =====================================================================

Only token dtypes are read (uint16, int32); the sequences must lie back to back from byte 0,
as Megatron writes them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from tierload.errors import ManifestError

MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<9sQBQQ")
DTYPE_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
               8: np.uint16}
TOKEN_CODES = (4, 8)  # int32, uint16: the dtypes Megatron picks for a vocabulary


@dataclass(frozen=True)
class MegatronIndex:
    """What an ``.idx`` says about its ``.bin``.

    Attributes:
        dtype: The token dtype (little-endian).
        tokens: Tokens in the ``.bin`` (the sum of the sequence sizes).
        sequences: Sequence count.
        documents: Document count (entries of the document index).
    """

    dtype: np.dtype
    tokens: int
    sequences: int
    documents: int


def parse_megatron_index(data: bytes, url: str = "") -> MegatronIndex:
    """Parse a whole ``.idx`` file.

    Raises:
        ManifestError: Not a Megatron index (magic, version, length), a dtype that is not a token
            dtype, or sequences that do not lie back to back in the ``.bin``.
    """
    if len(data) < _HEADER.size or not data.startswith(MAGIC):
        raise ManifestError(f"not a Megatron-LM index (no {MAGIC!r} magic); a .bin beside it is read as its tokens "
                            "only with a valid .idx (or remove the .idx to read the .bin raw with "
                            "manifest.token_dtype)", tier="cold", url=url)
    _magic, version, code, sequences, documents = _HEADER.unpack_from(data)
    if version != 1:
        raise ManifestError(f"Megatron-LM index version {version} is not supported (only 1)", tier="cold", url=url)
    if code not in TOKEN_CODES:
        name = np.dtype(DTYPE_CODES[code]).name if code in DTYPE_CODES else f"unknown code {code}"
        raise ManifestError(f"Megatron-LM index of dtype {name}: token files hold uint16 or int32 tokens",
                            tier="cold", url=url)
    expected = _HEADER.size + sequences * (4 + 8) + documents * 8
    if len(data) == expected + sequences:  # Megatron's multimodal index: one int8 mode per sequence after
        raise ManifestError(f"Megatron-LM multimodal index ({sequences} sequence modes after the document "
                            "indices): its .bin is not a token stream; write the text with a plain "
                            "(multimodal=False) IndexedDatasetBuilder", tier="cold", url=url)
    if len(data) != expected:
        raise ManifestError(f"Megatron-LM index of {sequences} sequences and {documents} documents is {expected} "
                            f"bytes long, the file has {len(data)}", tier="cold", url=url)
    dtype = np.dtype(DTYPE_CODES[code]).newbyteorder("<")
    sizes = np.frombuffer(data, dtype="<i4", count=sequences, offset=_HEADER.size).astype(np.int64)
    pointers = np.frombuffer(data, dtype="<i8", count=sequences, offset=_HEADER.size + 4 * sequences)
    starts = np.zeros(sequences, dtype=np.int64)
    np.cumsum(sizes[:-1] * dtype.itemsize, out=starts[1:])
    if (sizes < 0).any() or not np.array_equal(pointers, starts):
        raise ManifestError("Megatron-LM index whose sequences do not lie back to back in the .bin from byte 0 "
                            "(rewrite it with Megatron's IndexedDatasetBuilder)", tier="cold", url=url)
    return MegatronIndex(dtype=dtype, tokens=int(sizes.sum()), sequences=int(sequences), documents=int(documents))
