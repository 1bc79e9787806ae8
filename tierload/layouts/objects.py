"""One sample per object: image folders (``<prefix>/<label>/<name>.png``) and raw files.

The class of an object is its first folder below the dataset prefix (the torchvision
ImageFolder convention); class indices follow the sorted class names. Zero-byte objects are
never images: the image-folder layout skips and counts them; the raw-files layout yields
them as empty samples.
"""

from __future__ import annotations

import io
import logging
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from tierload.blocks import Block
from tierload.errors import DecodeError, ManifestError
from tierload.layouts.base import LayoutPlan
from tierload.stores.cold import ObjectInfo

log = logging.getLogger(__name__)


def _class_of(prefix_url: str, url: str) -> str:
    relative = url[len(prefix_url):].lstrip("/")
    return relative.split("/", 1)[0] if "/" in relative else ""


def plan_objects(prefix_url: str, objects: list[ObjectInfo], *, extensions: tuple[str, ...] | None,
                 skip_empty: bool) -> LayoutPlan:
    """One block and one sample per object, labelled by class folder.

    Args:
        prefix_url: The dataset prefix (no trailing slash).
        objects: The listing.
        extensions: Lower-case suffixes to keep (None keeps every object).
        skip_empty: Skip zero-byte objects (recorded in ``skipped``) instead of yielding them.

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
    blocks = [Block.of(obj.url, obj.version, 0, obj.size) for obj in kept]
    count = len(blocks)
    return LayoutPlan(
        blocks=blocks,
        sample_block=np.arange(count, dtype=np.int32),
        sample_index=np.zeros(count, dtype=np.int32),
        labels=np.array([class_index[_class_of(prefix_url, obj.url)] for obj in kept], dtype=np.int64),
        classes=class_names,
        skipped=skipped,
    )


def decode_image(data: bytes) -> torch.Tensor:
    """PNG/JPEG bytes -> uint8 tensor of shape (C, H, W); C is 1 (gray), 3 (RGB) or 4 (RGBA)."""
    with Image.open(io.BytesIO(data)) as opened:
        image: Image.Image = opened if opened.mode in ("L", "RGB", "RGBA") else opened.convert("RGB")
        array = np.asarray(image, dtype=np.uint8)
    array = array[None, :, :] if array.ndim == 2 else array.transpose(2, 0, 1)
    # Exactly one copy, into C-order (H, W, C) -> (C, H, W): it also makes the tensor writable
    # (PIL's buffer is read-only); a second copy would move another 1.5 MB for a 704x704 RGB image.
    return torch.from_numpy(np.array(array, dtype=np.uint8, order="C", copy=True))


class ImageDecoder:
    """Decodes one image per block; labels come from the manifest."""

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = labels

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        try:
            image = decode_image(data)
        except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad input
            raise DecodeError(f"block {block_index} is not a decodable image: {exc}") from exc
        return [(image, int(self.labels[block_index]))]


class RawDecoder:
    """Yields each object's bytes unchanged (``bytes``; empty for a zero-byte object).

    Given a uint8 tensor instead (the kvikio path reads blocks into GPU memory), yields it as is.
    """

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = labels

    def decode(self, block_index: int, data: bytes | torch.Tensor) -> Sequence[tuple[Any, int]]:
        if isinstance(data, torch.Tensor):
            return [(data, int(self.labels[block_index]))]
        return [(bytes(data), int(self.labels[block_index]))]
