"""Arrow arrays from Python lists and NumPy arrays without pyarrow importing pandas.

``pa.array(values)`` asks pyarrow's pandas shim whether ``values`` is "array-like" (a list) or
a pandas categorical (a NumPy array), and the shim imports pandas to find out (pyarrow 26:
``_is_array_like`` and ``pandas_api.is_categorical`` in ``array.pxi``); so does a compute
function given a NumPy argument (it is converted with ``pa.array``). In a process that does
not use pandas that import costs ~35 MB of RSS (measured: 284 -> 319 MB with torch and
tierload imported), the largest single item of a start-up at a million keys after torch
itself. Here arrays are built from their buffers instead (NumPy's memory is shared, not
copied); the start-up path (listing, manifest build, save and open) converts only through
this module, and ``tests/test_arrow_values.py`` checks that it leaves pandas unimported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

__all__ = ["from_numpy", "int64_array", "large_strings", "string_scalar", "to_numpy"]

_STRINGS = pa.large_string()


def large_strings(values: Sequence[str]) -> pa.Array:
    """``values`` as an Arrow large_string array (no nulls).

    Args:
        values: Python strings (any Unicode; stored as UTF-8).

    Returns:
        large_string array (len(values),).

    Raises:
        UnicodeEncodeError: A value holds a lone surrogate (not valid UTF-8), as ``pa.array`` would.
    """
    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(_STRINGS, len(encoded), [None, pa.py_buffer(offsets), data])


def from_numpy(array: np.ndarray) -> pa.Array:
    """A 1-D NumPy array of numbers or booleans as the Arrow array of the same type (no nulls).

    Numbers share ``array``'s memory (a contiguous copy is made only when it is strided);
    booleans are packed into Arrow's bitmap.

    Raises:
        ValueError: ``array`` is not 1-D.
        pyarrow.ArrowNotImplementedError: Its dtype has no fixed-width Arrow type (strings, objects).
    """
    if array.ndim != 1:
        raise ValueError(f"need a 1-D array, got shape {array.shape}")
    if array.dtype == np.bool_:
        bits = np.packbits(array, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(array), [None, pa.py_buffer(bits)])
    arrow_type = pa.from_numpy_dtype(array.dtype)
    return pa.Array.from_buffers(arrow_type, len(array), [None, pa.py_buffer(np.ascontiguousarray(array))])


def int64_array(values: Iterable[int] | np.ndarray) -> pa.Array:
    """``values`` (Python ints, or an integer array) as an Arrow int64 array."""
    if isinstance(values, np.ndarray):
        return from_numpy(values.astype(np.int64, copy=False))
    return from_numpy(np.fromiter(values, np.int64))


def string_scalar(value: str) -> pa.Scalar:
    """``value`` as an Arrow large_string scalar (``pa.scalar`` would import pandas)."""
    return large_strings([value])[0]


def to_numpy(array: pa.Array) -> np.ndarray:
    """A numeric or boolean Arrow array (no nulls) as NumPy: numbers as a read-only view of its
    buffer, booleans unpacked into a new ``bool`` array (``Array.to_numpy`` would import pandas).

    Raises:
        ValueError: ``array`` holds nulls, or its type is neither fixed-width numeric nor boolean.
    """
    if array.null_count:
        raise ValueError(f"need an array without nulls, got {array.null_count} nulls")
    if pa.types.is_boolean(array.type):
        bits = np.frombuffer(array.buffers()[1], np.uint8) if len(array) else np.zeros(0, np.uint8)
        return np.unpackbits(bits, bitorder="little", count=array.offset + len(array))[array.offset:].astype(bool)
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        raise ValueError(f"need a numeric or boolean array, got {array.type}")
    dtype = np.dtype(array.type.to_pandas_dtype())
    if not len(array):
        return np.zeros(0, dtype)
    return np.frombuffer(array.buffers()[1], dtype)[array.offset:array.offset + len(array)]
