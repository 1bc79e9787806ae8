"""Helpers shared by test modules."""

from __future__ import annotations

import io

import numpy as np


def put_indexed_objects(fs, prefix: str, count: int, *, size: int = 0, classes: int = 1) -> list[bytes]:
    """Write ``count`` objects whose payload starts with their index as 8 ASCII digits."""
    payloads = []
    for index in range(count):
        body = f"{index:08d}".encode() + bytes(max(0, size - 8))
        fs.pipe_file(f"{prefix}/{index % classes}/obj-{index:06d}.bin", body)
        payloads.append(body)
    fs.invalidate_cache()
    return payloads


def png_bytes(value: int, side: int = 8) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((side, side), value % 256, dtype=np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def index_of(sample) -> int:
    """Index encoded by :func:`put_indexed_objects` in a raw-file sample."""
    return int(bytes(sample[:8]).decode())
