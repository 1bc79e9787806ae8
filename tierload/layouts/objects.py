"""One sample per object: image folders (``<prefix>/<label>/<name>.png``) and raw files.

The class of an object is its first folder below the dataset prefix (the torchvision
ImageFolder convention); class indices follow the sorted class names. Zero-byte objects are
never images: the image-folder layout skips and counts them; the raw-files layout yields
them as empty samples.
"""

from __future__ import annotations

import io
import logging
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image

from tierload.blocks import Block
from tierload.errors import DecodeError, ManifestError
from tierload.layouts.base import LayoutPlan
from tierload.packs import PackIndex, PackMembers, group_objects
from tierload.stores.cold import ObjectInfo

log = logging.getLogger(__name__)


def _class_of(prefix_url: str, url: str) -> str:
    relative = url[len(prefix_url):].lstrip("/")
    return relative.split("/", 1)[0] if "/" in relative else ""


def plan_objects(prefix_url: str, objects: list[ObjectInfo], *, extensions: tuple[str, ...] | None,
                 skip_empty: bool, pack_threshold_bytes: int = 0, pack_target_bytes: int = 0) -> LayoutPlan:
    """One sample per object, labelled by class folder; one block per object or per pack of small ones.

    Args:
        prefix_url: The dataset prefix (no trailing slash).
        objects: The listing.
        extensions: Lower-case suffixes to keep (None keeps every object).
        skip_empty: Skip zero-byte objects (recorded in ``skipped``) instead of yielding them.
        pack_threshold_bytes: Objects smaller than this are packed (see :mod:`tierload.packs`).
        pack_target_bytes: About how large a pack grows; 0 disables packing.

    Raises:
        ManifestError: No object qualifies.
    """
    kept, skipped = [], {}
    for obj in objects:
        if extensions is not None and not obj.url.lower().endswith(extensions):
            skipped[obj.url] = "extension not in manifest.extensions"
        elif skip_empty and obj.size == 0:
            skipped[obj.url] = "zero-byte object is not an image"
        else:
            kept.append(obj)
    if not kept:
        raise ManifestError(f"no samples under the prefix ({len(objects)} objects listed, "
                            f"{len(skipped)} skipped; extensions={extensions})", tier="cold", url=prefix_url)
    if skipped:
        log.warning("%d objects under %s are not samples and were skipped (see manifest.skipped)",
                    len(skipped), prefix_url)
    class_names = sorted({_class_of(prefix_url, obj.url) for obj in kept})
    class_index = {name: i for i, name in enumerate(class_names)}
    runs = group_objects(kept, pack_threshold_bytes, pack_target_bytes)
    blocks = [_block_of(kept[run.start:run.stop]) for run in runs]
    lengths = np.fromiter((len(run) for run in runs), np.int64, len(runs))
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return LayoutPlan(
        blocks=blocks,
        sample_block=np.repeat(np.arange(len(runs), dtype=np.int32), lengths),
        sample_index=(np.arange(len(kept), dtype=np.int64) - first).astype(np.int32),
        labels=np.array([class_index[_class_of(prefix_url, obj.url)] for obj in kept], dtype=np.int64),
        classes=class_names,
        skipped=skipped,
    )


def _block_of(objects: list[ObjectInfo]) -> Block:
    if len(objects) == 1:
        obj = objects[0]
        return Block.of(obj.url, obj.version, 0, obj.size)
    return Block.pack(PackMembers.of([o.url for o in objects], [o.version for o in objects],
                                     [o.size for o in objects]))


def decode_image(data: bytes) -> torch.Tensor:
    """PNG/JPEG bytes -> uint8 tensor of shape (C, H, W); C is 1 (gray), 3 (RGB) or 4 (RGBA)."""
    with Image.open(io.BytesIO(data)) as opened:
        image: Image.Image = opened if opened.mode in ("L", "RGB", "RGBA") else opened.convert("RGB")
        array = np.asarray(image, dtype=np.uint8)
    array = array[None, :, :] if array.ndim == 2 else array.transpose(2, 0, 1)
    # Exactly one copy, into C-order (H, W, C) -> (C, H, W): it also makes the tensor writable
    # (PIL's buffer is read-only); a second copy would move another 1.5 MB for a 704x704 RGB image.
    return torch.from_numpy(np.array(array, dtype=np.uint8, order="C", copy=True))


class PackSamples(Sequence[tuple[Any, int]]):
    """The samples of one block, decoded when asked for (a pack's samples are spread by the shuffle).

    Each sample is decoded from a zero-copy slice of the block's bytes.

    Args:
        data: The block's raw bytes (or a uint8 tensor).
        first: Sample id of the block's first member.
        starts, ends: int64 (members,): byte range of each member inside the block.
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


class ImageDecoder:
    """Decodes the images of a block (one object, or a pack's members) when asked; labels from the manifest.

    Args:
        labels: int64 (num_samples,): class of each sample.
        index: Where each sample lies inside its block.
    """

    def __init__(self, labels: np.ndarray, index: PackIndex) -> None:
        self.labels = labels
        self.index = index

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        first, starts, ends = self.index.span(block_index)
        if len(starts) == 1:  # a plain block: its one sample, decoded now
            return [(_checked_image(data), int(self.labels[first]))]
        return PackSamples(data, first, starts, ends, self.labels, _checked_image)


def _checked_image(data: Any) -> torch.Tensor:
    try:
        return decode_image(data)
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad input
        raise DecodeError(f"an object is not a decodable image: {exc}") from exc


def _raw_bytes(data: Any) -> Any:
    return data if isinstance(data, torch.Tensor) else bytes(data)


class RawDecoder:
    """Yields each object's bytes unchanged (``bytes``; empty for a zero-byte object).

    Given a uint8 tensor instead (the kvikio path reads blocks into GPU memory), yields slices of it.

    Args:
        labels: int64 (num_samples,): class of each sample.
        index: Where each sample lies inside its block.
    """

    def __init__(self, labels: np.ndarray, index: PackIndex) -> None:
        self.labels = labels
        self.index = index

    def decode(self, block_index: int, data: bytes | torch.Tensor) -> Sequence[tuple[Any, int]]:
        first, starts, ends = self.index.span(block_index)
        if len(starts) == 1:  # a plain block: its one sample, decoded now
            return [(_raw_bytes(data), int(self.labels[first]))]
        return PackSamples(data, first, starts, ends, self.labels, _raw_bytes)
