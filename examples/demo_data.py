"""Synthetic data for the examples: ``.npy`` rows whose first value is the row's id.

``python examples/demo_data.py`` is not needed: each example's ``--demo`` flag starts a local
S3 server (moto, ``pip install 'tierload[demo]'``) and writes this data set into it.
"""

from __future__ import annotations

import io

import numpy as np


def write_npy_dataset(fs, prefix: str, rows: int, dim: int = 8, files: int = 2) -> None:
    """Write ``rows`` float32 rows of ``dim`` values, split over ``files`` .npy files under ``prefix``.

    Row ``i`` is ``[i, x_1 ... x_{dim-1}]`` with ``x`` drawn from a fixed seed, so a training
    loop can report exactly which rows it saw.
    """
    rng = np.random.default_rng(0)
    data = rng.normal(size=(rows, dim)).astype(np.float32)
    data[:, 0] = np.arange(rows, dtype=np.float32)
    for index, part in enumerate(np.array_split(data, files)):
        buffer = io.BytesIO()
        np.save(buffer, part)
        fs.pipe_file(f"{prefix}/part-{index:03d}.npy", buffer.getvalue())
    fs.invalidate_cache()


def target_of(rows):
    """The regression target the examples learn: the sum of a row's features (its id excluded)."""
    return rows[:, 1:].sum(dim=1, keepdim=True)
