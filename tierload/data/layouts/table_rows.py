"""An Arrow table's rows as samples: ``({column: value}, label)``, each value's type a function
of its column's schema alone (the rules are in :mod:`tierload.data.layouts.parquet`'s docstring;
the Parquet and Arrow layouts both decode through here)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from tierload.errors import DecodeError


def _is_numeric_list(kind: pa.DataType) -> bool:
    return (pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)) and (
        pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type))


def _numeric_list_rows(array: pa.Array) -> list[Any]:
    """Per-row values of a numeric list column; the type of a row depends only on the schema.

    * element field not nullable (``pa.list_(pa.field("item", pa.int64(), nullable=False))``):
      a row is a 1-D tensor of the value type (``int64`` -> ``torch.int64``, exact);
    * element field nullable (pyarrow's default for ``pa.list_(pa.int64())``): a row is
      ``{"values": tensor, "valid": bool tensor}`` of the row's length, ``values`` in the
      value type with 0 where ``valid`` is False, whether or not this row group holds a null;
    * a null row (the list itself null) is ``None``.

    Raises:
        DecodeError: The element field is declared not nullable yet holds a null.
    """
    if not len(array):
        return []
    dtype = np.dtype(array.type.value_type.to_pandas_dtype())
    nullable_elements = array.type.value_field.nullable
    flat = array.flatten()  # the valid rows' elements only, slicing offsets applied
    if flat.null_count and not nullable_elements:
        raise DecodeError(f"list column of {array.type} declares its elements not nullable yet holds "
                          f"{flat.null_count} null elements")
    valid = flat.is_valid().to_numpy(zero_copy_only=False)
    values = (flat.fill_null(0) if flat.null_count else flat).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    bounds = np.cumsum(lengths)[:-1]
    rows: list[Any] = []
    for row_valid, row_values, row_mask in zip(array.is_valid().to_numpy(zero_copy_only=False),
                                               np.split(values, bounds), np.split(valid, bounds), strict=True):
        if not row_valid:
            rows.append(None)
        elif nullable_elements:
            rows.append({"values": torch.from_numpy(row_values.copy()), "valid": torch.from_numpy(row_mask.copy())})
        else:
            rows.append(torch.from_numpy(row_values.copy()))
    return rows


def _column_values(column: pa.ChunkedArray) -> Sequence[Any]:
    """Per-row values of a column: tensors for numeric lists (see :func:`_numeric_list_rows`), else Python values.

    The type of each value depends only on ``column.type`` (see the module docstring).

    Scalar numbers are Python ``int``/``float``/``bool`` with ``None`` for nulls, whatever the
    rest of the row group holds.
    """
    array = column.combine_chunks()
    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        if array.null_count == 0:
            return array.to_numpy(zero_copy_only=False).tolist()
    if _is_numeric_list(kind):
        return _numeric_list_rows(array)
    return array.to_pylist()


def table_samples(table: pa.Table, label_column: str | None) -> list[tuple[dict[str, Any], int]]:
    """``(row, label)`` of every row: ``label_column`` (when the table has it) moved out of the
    row into an int label (-1 for a null), else -1."""
    names = [name for name in table.column_names if name != label_column]
    values = {name: _column_values(table.column(name)) for name in names}
    if label_column and label_column in table.column_names:
        labels = [int(v) if v is not None else -1 for v in table.column(label_column).to_pylist()]
    else:
        labels = [-1] * table.num_rows
    return [({name: values[name][i] for name in names}, labels[i]) for i in range(table.num_rows)]
