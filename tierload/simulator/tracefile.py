"""Recorded traces on disk: text, one access per line, or Parquet.

Text: ``KEY [SIZE_BYTES [NODE [EPOCH]]]`` separated by white space; blank lines and lines
starting with ``#`` are skipped. Parquet: a ``key`` column (string or integer) and optional
``size_bytes``, ``node`` and ``epoch`` columns. A missing size is the ``block_bytes``
default, a missing node 0, a missing epoch 0 (one decay clock tick for the whole trace).
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import numpy as np

from tierload.errors import ConfigError
from tierload.simulator.trace import DEFAULT_BLOCK_BYTES, Trace

PARQUET_SUFFIXES = (".parquet", ".pq")


def read_trace(path: str | os.PathLike, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Trace:
    """Read a recorded trace.

    Args:
        path: A text file or a Parquet file (by suffix: ``.parquet``, ``.pq``).
        block_bytes: Size of blocks whose size the file does not give.

    Returns:
        The trace; block indices number the keys in order of first appearance.

    Raises:
        ConfigError: The file is missing, a line or row is malformed (named by its number),
            or one key is given two different sizes.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"trace file {str(file)!r} does not exist")
    if file.suffix.lower() in PARQUET_SUFFIXES:
        return _read_parquet(file, block_bytes)
    return _read_text(file, block_bytes)


def _read_text(file: Path, block_bytes: int) -> Trace:
    index: dict[str, int] = {}
    sizes: list[int] = []
    explicit: list[bool] = []
    block, node, epoch = array("q"), array("q"), array("d")
    with file.open("r", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if len(parts) > 4:
                raise ConfigError(f"{file}:{line_no}: {len(parts)} fields; expected KEY [SIZE_BYTES [NODE [EPOCH]]]")
            try:
                size = int(parts[1]) if len(parts) > 1 else None
                node.append(int(parts[2]) if len(parts) > 2 else 0)
                epoch.append(float(parts[3]) if len(parts) > 3 else 0.0)
            except ValueError:
                raise ConfigError(f"{file}:{line_no}: {line.strip()!r}: SIZE_BYTES and NODE must be whole numbers, "
                                  "EPOCH a number") from None
            if (size is not None and size < 0) or node[-1] < 0:
                raise ConfigError(f"{file}:{line_no}: sizes and nodes must be >= 0")
            key = parts[0]
            known = index.get(key)
            if known is None:
                known = index[key] = len(sizes)
                sizes.append(block_bytes if size is None else size)
                explicit.append(size is not None)
            elif size is not None and size != sizes[known]:
                if explicit[known]:
                    raise ConfigError(f"{file}:{line_no}: key {key!r} has size {size}, but {sizes[known]} earlier; "
                                      "a changed block needs a new key")
                sizes[known], explicit[known] = size, True
            block.append(known)
    if not block:
        raise ConfigError(f"trace file {str(file)!r} holds no accesses")
    return Trace(np.frombuffer(block, dtype=np.int64).copy(), np.frombuffer(node, dtype=np.int64).copy(),
                 np.frombuffer(epoch, dtype=np.float64).copy(), np.array(sizes, dtype=np.int64), keys=tuple(index))


def _read_parquet(file: Path, block_bytes: int) -> Trace:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"{str(file)!r} is not a readable Parquet file: {exc}") from None
    if "key" not in table.column_names:
        raise ConfigError(f"{str(file)!r}: a Parquet trace needs a 'key' column; it has {table.column_names}")
    if table.num_rows == 0:
        raise ConfigError(f"trace file {str(file)!r} holds no accesses")
    encoded = pc.dictionary_encode(table.column("key").combine_chunks())
    block = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    keys = tuple(str(key) for key in encoded.dictionary.to_pylist())

    def column(name: str, default, dtype) -> np.ndarray:
        if name not in table.column_names:
            return np.full(table.num_rows, default, dtype=dtype)
        values = table.column(name)
        if values.null_count:
            raise ConfigError(f"{str(file)!r}: column {name!r} has empty values")
        return values.to_numpy().astype(dtype)

    sizes_per_access = column("size_bytes", block_bytes, np.int64)
    node = column("node", 0, np.int64)
    if (sizes_per_access < 0).any() or (node < 0).any():
        raise ConfigError(f"{str(file)!r}: sizes and nodes must be >= 0")
    _, first = np.unique(block, return_index=True)
    sizes = sizes_per_access[first]
    mismatch = np.flatnonzero(sizes_per_access != sizes[block])
    if len(mismatch):
        row = int(mismatch[0])
        raise ConfigError(f"{str(file)!r}: row {row}: key {keys[block[row]]!r} has size {sizes_per_access[row]}, but "
                          f"{sizes[block[row]]} earlier; a changed block needs a new key")
    return Trace(block, node, column("epoch", 0.0, np.float64), sizes, keys=keys)


def write_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Write a trace as text or Parquet (by suffix), readable by :func:`read_trace`."""
    file = Path(path).expanduser()
    keys = np.array(trace.keys if trace.keys is not None else [str(b) for b in range(trace.num_blocks)], dtype=object)
    if file.suffix.lower() in PARQUET_SUFFIXES:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"key": pa.array(keys[trace.block], type=pa.string()),
                          "size_bytes": trace.block_bytes[trace.block], "node": trace.node, "epoch": trace.epoch})
        pq.write_table(table, file)
        return
    with file.open("w", encoding="utf-8") as handle:
        handle.write("# key size_bytes node epoch\n")
        for block, node, epoch in zip(trace.block.tolist(), trace.node.tolist(), trace.epoch.tolist(), strict=True):
            handle.write(f"{keys[block]} {trace.block_bytes[block]} {node} {epoch:g}\n")
