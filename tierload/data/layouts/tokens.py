"""Token files read in place, cut into windows of ``seq_len + 1`` tokens: LLM pretraining data.

Token files (in listing order):

* ``x.npy``: any shape, read flat in C order; the dtype comes from the header.
* ``x.bin`` with ``x.idx`` beside it: a Megatron-LM indexed dataset; the dtype and the token count
  come from the ``.idx`` (:mod:`tierload.data.layouts.megatron_index`). Its sequences are read
  back to back, as Megatron's GPT dataset reads them: windows cross document boundaries.
* ``x.bin`` alone: raw little-endian tokens of ``manifest.token_dtype`` (``uint16`` or ``uint32``).

Token dtypes are uint16, uint32 and int32 (Megatron's dtype for vocabularies over 65,535); other
objects are skipped (``manifest.skipped`` says why).

Windows: ``W = manifest.seq_len_tokens + 1`` tokens each, back to back without overlap (as
LitData's TokensLoader with ``block_size = seq_len + 1``): window ``k`` is tokens ``[k*W, (k+1)*W)``,
so a token is in at most one window and the target of a window's last input token is its own
last token. With ``manifest.token_cross_files: true`` (the default) the files are one token stream
in listing order and a window may run from the end of one file into the next (into several, if
they are shorter than a window); with ``false`` each file is cut on its own and no window crosses
a file boundary. The tail that does not fill a window (of the stream, or of each file) is
dropped, never padded: ``manifest.extra["tail_tokens"]`` counts the dropped tokens and the
manifest build logs it.

Blocks: a window is a sample and belongs to the block where it starts. A block is a byte range
of one file holding whole windows, about ``manifest.block_bytes`` (a multiple of ``W`` tokens,
at least one window), so a window never crosses a block boundary inside a file and blocks do
not overlap. The one window per file boundary that runs into the next file(s) ends its file's
last block; the at most ``seq_len`` tokens it takes from the following files are read once,
pinned to their listed versions, when the manifest is built (one small ranged GET, like an
``.npy`` header) and carried in the manifest (``extra["carries"]``), so every sample decodes from
its one block. Those tokens of the following file are in no block (they belong to the window
before).

Samples are ``(window, -1)``: an int64 tensor of ``W`` tokens, or with
``manifest.token_output: pair`` an ``(input, target)`` pair of int64 tensors of ``seq_len`` tokens
(``window[:-1]``, ``window[1:]``). Shuffle is block-aware like every multi-sample layout.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence, overload

import numpy as np
import torch

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan
from tierload.data.layouts.megatron_index import parse_megatron_index
from tierload.data.layouts.npy import read_npy_header
from tierload.errors import DecodeError, ManifestError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

# Token dtypes read (any byte order in a .npy; little-endian in a .bin).
_TOKEN_KINDS = {("u", 2), ("u", 4), ("i", 4)}
_READS_IN_FLIGHT = 16  # the listing's small GETs (headers, indexes, carried tokens) at once


@dataclass(frozen=True)
class TokenFile:
    """One file of tokens.

    Attributes:
        url, version: The object (its listed version).
        offset: Byte offset of the first token.
        tokens: Token count.
        dtype: Token dtype (with its byte order).
    """

    url: str
    version: str
    offset: int
    tokens: int
    dtype: np.dtype


def _token_file(source: ColdSource, obj: ObjectInfo, index: ObjectInfo | None, raw_dtype: np.dtype) -> TokenFile:
    """Raises: ManifestError (not a token file of a readable shape)."""
    lower = obj.url.lower()
    if lower.endswith(".npy"):
        dtype, shape, offset = read_npy_header(source, obj)
        tokens = int(np.prod(shape)) if shape else 1
    elif index is not None:
        parsed = parse_megatron_index(source.read(index.url, index.version, 0, index.size), index.url)
        dtype, offset, tokens = parsed.dtype, 0, parsed.tokens
    else:
        dtype, offset = raw_dtype, 0
        if obj.size % dtype.itemsize:
            raise ManifestError(f"{obj.size} bytes are not a whole number of {dtype.name} tokens; set "
                                f"manifest.token_dtype to the file's dtype", tier="cold", url=obj.url)
        tokens = obj.size // dtype.itemsize
    if (dtype.kind, dtype.itemsize) not in _TOKEN_KINDS:
        raise ManifestError(f"token file of dtype {dtype.name}: tokens are uint16, uint32 or int32 "
                            "(save them as one of those)", tier="cold", url=obj.url)
    if offset + tokens * dtype.itemsize > obj.size:
        raise ManifestError(f"{tokens} {dtype.name} tokens need {offset + tokens * dtype.itemsize} bytes, "
                            f"the file has {obj.size}", tier="cold", url=obj.url)
    return TokenFile(obj.url, obj.version, offset, tokens, dtype)


def token_files(source: ColdSource, objects: list[ObjectInfo], raw_dtype: str) -> tuple[list[TokenFile], dict]:
    """The token files of a listing, in listing order, and ``{url: reason}`` of the objects skipped.

    Raises:
        ManifestError: A token file cannot be read as one (see the module docstring).
    """
    by_url = {obj.url: obj for obj in objects}
    candidates: list[tuple[ObjectInfo, ObjectInfo | None]] = []
    skipped: dict[str, str] = {}
    for obj in objects:
        lower = obj.url.lower()
        if lower.endswith(".idx") and obj.url[:-4] + ".bin" in by_url:
            continue  # read with its .bin
        if not lower.endswith((".bin", ".npy")):
            skipped[obj.url] = "not a token file (.bin, .npy, or a Megatron-LM .bin + .idx pair)"
            continue
        candidates.append((obj, by_url.get(obj.url[:-4] + ".idx") if lower.endswith(".bin") else None))
    dtype = np.dtype(raw_dtype).newbyteorder("<")
    # A header or an index is one small GET a file: in flight together, not one round trip after another.
    with ThreadPoolExecutor(max_workers=_READS_IN_FLIGHT) as pool:
        found = list(pool.map(lambda item: _token_file(source, item[0], item[1], dtype), candidates))
    files: list[TokenFile] = []
    for file in found:
        if file.tokens == 0:
            skipped[file.url] = "holds no tokens"
        else:
            files.append(file)
    return files, skipped


def _following_tokens(source: ColdSource, files: list[TokenFile], after: int, count: int) -> list[int]:
    """The first ``count`` tokens of the stream after file ``after`` (read pinned to each file's version)."""
    out: list[int] = []
    for file in files[after + 1:]:
        take = min(count - len(out), file.tokens)
        data = source.read(file.url, file.version, file.offset, take * file.dtype.itemsize)
        out.extend(np.frombuffer(data, dtype=file.dtype).astype(np.int64).tolist())
        if len(out) == count:
            return out
    raise ManifestError(f"the token stream ends {count - len(out)} tokens short of a window", tier="cold",
                        url=files[after].url)


def plan_tokens(source: ColdSource, objects: list[ObjectInfo], *, block_bytes: int, seq_len: int, raw_dtype: str,
                cross_files: bool, output: str) -> LayoutPlan:
    """Blocks = byte ranges of whole windows of each token file; samples = windows of ``seq_len + 1`` tokens.

    Args:
        source: The cold tier under the dataset prefix.
        objects: The listing, in listing order.
        block_bytes: About how many bytes a block holds (at least one window).
        seq_len: Tokens per window minus one.
        raw_dtype: ``"uint16"`` or ``"uint32"``: the dtype of a ``.bin`` without an ``.idx``.
        cross_files: Windows run on across file boundaries (see the module docstring).
        output: ``"window"`` or ``"pair"`` (kept for the decoder).

    Raises:
        ManifestError: No token file, no whole window, or a file that is not a readable token file.
    """
    files, skipped = token_files(source, objects, raw_dtype)
    if not files:
        raise ManifestError(f"no token files (.bin, .npy, Megatron-LM .bin + .idx) under the prefix "
                            f"({len(objects)} objects)", tier="cold", url=source.url)
    width = seq_len + 1
    total = sum(file.tokens for file in files)
    stream_windows = total // width
    blocks: list[Block] = []
    counts: list[int] = []
    block_file: list[int] = []
    carried: dict[int, tuple[int, int]] = {}  # block -> (its file, tokens its last window takes from the next)
    tail = total - stream_windows * width if cross_files else sum(file.tokens % width for file in files)
    seen = 0  # tokens of the stream before this file
    for number, file in enumerate(files):
        if cross_files:
            first = -(-seen // width)  # the first window that starts in this file
            count = max(0, min(stream_windows, -(-(seen + file.tokens) // width)) - first)
            start = first * width - seen
        else:
            count, start = file.tokens // width, 0
        seen += file.tokens
        if count == 0:
            if not cross_files:
                skipped[file.url] = f"{file.tokens} tokens, fewer than one window of {width}"
            continue
        per_block = max(1, block_bytes // (width * file.dtype.itemsize))
        for lo in range(0, count, per_block):
            hi = min(count, lo + per_block)
            first_token, end = start + lo * width, start + hi * width
            blocks.append(Block.of(file.url, file.version, file.offset + first_token * file.dtype.itemsize,
                                   (min(end, file.tokens) - first_token) * file.dtype.itemsize))
            counts.append(hi - lo)
            block_file.append(number)
            if end > file.tokens:  # the last window runs into the next file(s)
                carried[len(blocks) - 1] = (number, end - file.tokens)
    if not blocks:
        hint = "" if cross_files else " or set manifest.token_cross_files: true"
        raise ManifestError(f"{total} tokens in {len(files)} token files make no window of {width} tokens "
                            f"(manifest.seq_len_tokens={seq_len} + 1); lower manifest.seq_len_tokens{hint}",
                            tier="cold", url=source.url)
    with ThreadPoolExecutor(max_workers=_READS_IN_FLIGHT) as pool:
        taken = pool.map(lambda item: _following_tokens(source, files, *item), carried.values())
        carries = {str(block): tokens for block, tokens in zip(carried, taken, strict=True)}
    if tail:
        log.info("token windows of %s: %d tokens do not fill a window of %d and are dropped", source.url, tail, width)
    described = [{"url": f.url, "descr": np.lib.format.dtype_to_descr(f.dtype), "tokens": f.tokens} for f in files]
    extra = {"seq_len": seq_len, "output": output, "cross_files": cross_files, "tail_tokens": int(tail),
             "files": described, "block_file": block_file, "carries": carries}
    return LayoutPlan.of_counts(blocks, counts, extra=extra, skipped=skipped)


class TokenWindows(Sequence[tuple[Any, int]]):
    """The windows of one decoded block, each made on access: the block stays in its file's dtype
    (a 64 MiB block of uint16 tokens is not held as 256 MiB of int64), and each window is an int64
    tensor of its own (holding one does not keep the block alive).

    Args:
        tokens: The block's tokens in the file's dtype (a view of its bytes).
        carry: int64: the tokens its last window takes from the following file(s) (may be empty).
        width: Tokens per window.
        pairs: Yield ``((input, target), -1)`` instead of ``(window, -1)``.
    """

    def __init__(self, tokens: np.ndarray, carry: np.ndarray, width: int, pairs: bool) -> None:
        self.tokens, self.carry, self.width, self.pairs = tokens, carry, width, pairs

    def __len__(self) -> int:
        return (len(self.tokens) + len(self.carry)) // self.width

    @overload
    def __getitem__(self, index: int) -> tuple[Any, int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[Any, int]]: ...

    def __getitem__(self, index: int | slice) -> tuple[Any, int] | list[tuple[Any, int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(f"window {index} of a block of {len(self)} windows")
        first = (index % len(self)) * self.width
        window = self.tokens[first:first + self.width].astype(np.int64)  # a copy, in native byte order
        if len(window) < self.width:
            window = np.concatenate([window, self.carry])
        tensor = torch.from_numpy(window)
        return ((tensor[:-1], tensor[1:]) if self.pairs else tensor), -1


class TokenDecoder:
    """A block's bytes (plus its carried tokens) as windows (:class:`TokenWindows`).

    Windows are int64 tensors of ``seq_len + 1`` tokens; inputs and targets of ``seq_len`` tokens.
    """

    def __init__(self, extra: dict[str, Any]) -> None:
        self.width = int(extra["seq_len"]) + 1
        self.pairs = extra["output"] == "pair"
        self.dtypes = [np.lib.format.descr_to_dtype(f["descr"]) for f in extra["files"]]
        self.block_file = extra["block_file"]
        self.carries = extra["carries"]

    def decode(self, block_index: int, data: bytes) -> TokenWindows:
        """Raises: DecodeError (the bytes are not whole windows: the block is not what the manifest planned)."""
        dtype = self.dtypes[self.block_file[block_index]]
        carry = np.asarray(self.carries.get(str(block_index), ()), dtype=np.int64)
        if len(data) % dtype.itemsize or (len(data) // dtype.itemsize + len(carry)) % self.width:
            raise DecodeError(f"token block {block_index} of {len(data)} bytes ({dtype.name}, {len(carry)} carried "
                              f"tokens) is not a whole number of windows of {self.width} tokens; list the "
                              "dataset again (refresh_manifest=True)")
        return TokenWindows(np.frombuffer(data, dtype=dtype), carry, self.width, self.pairs)
