"""The demo's real dataset: scikit-learn's bundled handwritten digits (1,797 8x8 images).

Written to an S3 bucket either as PNG files in class folders (``<prefix>/<label>/<n>.png``)
or as Parquet files (columns ``pixels``: 64 uint8, ``label``: int64), split into a training
and a held-out prefix.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image


def load_digits_uint8(holdout_fraction: float = 0.2, seed: int = 0):
    """The digits as uint8 images (N, 8, 8) scaled 0..255, with labels, split train/held-out.

    Returns:
        ``((train_images, train_labels), (test_images, test_labels))``.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(len(labels) * (1 - holdout_fraction))
    train, test = order[:cut], order[cut:]
    return (images[train], labels[train]), (images[test], labels[test])


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def upload_imagefolder(fs, prefix: str, images: np.ndarray, labels: np.ndarray) -> int:
    """Write one PNG per image under ``prefix/<label>/<index>.png``; returns bytes written."""
    def put(i: int) -> int:
        data = _png(images[i])
        fs.pipe_file(f"{prefix}/{labels[i]}/{i:05d}.png", data)
        return len(data)

    with ThreadPoolExecutor(16) as pool:
        return sum(pool.map(put, range(len(labels))))


def upload_parquet(fs, prefix: str, images: np.ndarray, labels: np.ndarray, files: int = 3,
                   row_group_rows: int = 64) -> int:
    """Write the images as ``files`` Parquet files of ``row_group_rows``-row groups; returns bytes."""
    written = 0
    for part, index in enumerate(np.array_split(np.arange(len(labels)), files)):
        flat = images[index].reshape(len(index), -1)
        # Non-nullable pixels decode to plain uint8 tensors (nullable elements decode to values + mask)
        pixel_type = pa.list_(pa.field("item", pa.uint8(), nullable=False), flat.shape[1])
        pixels = pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel(), type=pa.uint8()), type=pixel_type)
        table = pa.table({"pixels": pixels, "label": pa.array(labels[index], type=pa.int64())})
        buffer = io.BytesIO()
        pq.write_table(table, buffer, row_group_size=row_group_rows)
        fs.pipe_file(f"{prefix}/part-{part:04d}.parquet", buffer.getvalue())
        written += buffer.tell()
    return written
