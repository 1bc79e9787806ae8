"""One sample per object, decoded: images (PNG/JPEG) and raw bytes, cut from a block's bytes.

A block is one object or a pack of them (:mod:`tierload.data.packs`); its samples are cut with the
manifest's member spans (:mod:`tierload.data.member_spans`) and labelled from the manifest's
labels. Planning these layouts is :mod:`tierload.data.layouts.objects`; this module needs neither
pyarrow nor the listing, so a DataLoader worker that decodes never loads them.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from PIL import Image

from tierload.errors import DecodeError

if TYPE_CHECKING:
    import torch

    from tierload.data.member_spans import MemberSpans


def decode_image(data: bytes) -> torch.Tensor:
    """PNG/JPEG bytes -> uint8 tensor of shape (C, H, W); C is 1 (gray), 3 (RGB) or 4 (RGBA)."""
    with Image.open(io.BytesIO(data)) as opened:
        image: Image.Image = opened if opened.mode in ("L", "RGB", "RGBA") else opened.convert("RGB")
        array = np.asarray(image, dtype=np.uint8)
    array = array[None, :, :] if array.ndim == 2 else array.transpose(2, 0, 1)
    # Exactly one copy, into C-order (H, W, C) -> (C, H, W): it also makes the tensor writable
    # (PIL's buffer is read-only); a second copy would move another 1.5 MB for a 704x704 RGB image.
    import torch

    return torch.from_numpy(np.array(array, dtype=np.uint8, order="C", copy=True))


class PackSamples(Sequence[tuple[Any, int]]):
    """The samples of one block, decoded when asked for (a pack's samples are spread by the shuffle).

    Each sample is decoded from a zero-copy slice of the block's bytes.

    Args:
        data: The block's raw bytes (or a uint8 tensor).
        first: Sample id of the block's first member.
        starts, ends: int32 or int64 (members,): byte range of each member inside the block.
        labels: int64 (num_samples,): the manifest's labels.
        decode: ``decode(slice) -> sample``.
    """

    def __init__(self, data: Any, first: int, starts: np.ndarray, ends: np.ndarray, labels: np.ndarray,
                 decode: Callable[[Any], Any]) -> None:
        self._view = memoryview(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
        self._first = first
        self._starts = starts.tolist()
        self._ends = ends.tolist()
        self._labels = labels
        self._decode = decode

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        sample = self._decode(self._view[self._starts[position]:self._ends[position]])
        return sample, int(self._labels[self._first + position])


class ObjectDecoder:
    """Cuts a block (one object, or a pack's members) into its samples, each decoded by
    ``decode_sample`` when asked for; labels from the manifest.

    Args:
        labels: int64 (num_samples,): class of each sample.
        index: Where each sample lies inside its block.
        decode_sample: One object's bytes (a slice of the block's, or of a uint8 tensor) -> its sample.
    """

    def __init__(self, labels: np.ndarray, index: MemberSpans, decode_sample: Callable[[Any], Any]) -> None:
        self.labels = labels
        self.index = index
        self.decode_sample = decode_sample

    def decode(self, block_index: int, data: bytes | torch.Tensor) -> Sequence[tuple[Any, int]]:
        first, starts, ends = self.index.span(block_index)
        if len(starts) == 1:  # a plain block: its one sample, decoded now
            return [(self.decode_sample(data), int(self.labels[first]))]
        return PackSamples(data, first, starts, ends, self.labels, self.decode_sample)

    def decode_member(self, sample_id: int, data: bytes) -> tuple[Any, int]:
        """Sample ``sample_id`` from its object's bytes alone (a pack member read by itself)."""
        return self.decode_sample(data), int(self.labels[sample_id])


def image_decoder(labels: np.ndarray, index: MemberSpans) -> ObjectDecoder:
    """Each object an image (PNG/JPEG) -> uint8 tensor (C, H, W); a bad one raises ``DecodeError``."""
    return ObjectDecoder(labels, index, _checked_image)


def raw_decoder(labels: np.ndarray, index: MemberSpans) -> ObjectDecoder:
    """Each object's bytes unchanged (``bytes``; empty for a zero-byte object); given a uint8 tensor
    instead (the kvikio path reads blocks into GPU memory), slices of it."""
    return ObjectDecoder(labels, index, _raw_bytes)


def _checked_image(data: Any) -> torch.Tensor:
    try:
        return decode_image(data)
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad input
        raise DecodeError(f"an object is not a decodable image: {exc}") from exc


def _raw_bytes(data: Any) -> Any:
    import torch  # loaded by then (the decoding process imported it): a dict lookup

    return data if isinstance(data, torch.Tensor) else bytes(data)
