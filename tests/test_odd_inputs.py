"""Inputs as they come (issue 12 item 7): tar shards with scattered members, Parquet lists with nulls.

Each test writes a real file to the local S3 server (moto over HTTP) and reads it through
``TieredDataset`` with a real local Ray.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from helpers import tar_of

import tierload
from tierload.data.layouts.webdataset import WebDatasetDecoder


def samples_of(dataset) -> list[dict]:
    return [sample for sample, _label in dataset]


def test_b36_members_of_one_sample_that_are_not_adjacent_make_whole_samples(bucket, tier_config, make_dataset):
    """Case B36: members 0.a, 1.a, 0.b, 1.b of one shard make 2 whole samples, never 4 halves"""
    name, fs = bucket
    fs.pipe_file(f"{name}/wds/shard-0.tar", tar_of([("0.a", b"a0"), ("1.a", b"a1"), ("0.b", b"b0"), ("1.b", b"b1")]))
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/wds", tier_config(warm=None), layout="webdataset", shuffle=False)
    samples = samples_of(dataset)
    assert sorted((s["__key__"], s["a"], s["b"]) for s in samples) == [("0", b"a0", b"b0"), ("1", b"a1", b"b1")]


def test_scattered_members_are_never_split_across_range_blocks(bucket, tier_config, make_dataset):
    """Case B36. A shard cut into many blocks keeps each key whole, even when its members are far apart."""
    name, fs = bucket
    payload = bytes(3000)
    members = [(f"{i:03d}.a", payload + bytes([i])) for i in range(20)]
    members += [(f"{i:03d}.b", bytes([i])) for i in (7, 3)]  # 3 and 7 are finished only at the end
    members += [(f"{i:03d}.b", bytes([i])) for i in range(20) if i not in (3, 7)]
    members += [(f"{i:03d}.c", bytes([i])) for i in range(20, 30)]  # whole adjacent samples after them
    fs.pipe_file(f"{name}/wds/shard-0.tar", tar_of(members))
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/wds", tier_config(warm=None, manifest={"block_bytes": 8192}), layout="webdataset",
                           shuffle=False)
    assert len(dataset.manifest.blocks) > 1
    samples = samples_of(dataset)
    keys = [s["__key__"] for s in samples]
    assert sorted(keys) == [f"{i:03d}" for i in range(30)]  # each sample exactly once
    for sample in samples:
        i = int(sample["__key__"])
        expected = {"a": payload + bytes([i]), "b": bytes([i])} if i < 20 else {"c": bytes([i])}
        assert {k: v for k, v in sample.items() if k != "__key__"} == expected


def test_decoder_groups_members_by_key_within_a_block():
    """Case B36: the decoder groups a block's members by key, adjacent or not"""
    data = tar_of([("0.a", b"a0"), ("1.a", b"a1"), ("0.b", b"b0"), ("1.b", b"b1")])
    out = WebDatasetDecoder(decode=False).decode(0, data)
    assert [sample for sample, _ in out] == [{"__key__": "0", "a": b"a0", "b": b"b0"},
                                            {"__key__": "1", "a": b"a1", "b": b"b1"}]


def parquet_rows(bucket, make_dataset, tier_config, table: pa.Table) -> dict[int, dict]:
    """Write ``table`` with row groups of 2 to the local S3 server; read it back as ``{i: row}``."""
    name, fs = bucket
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=2)
    fs.pipe_file(f"{name}/pq/part-0.parquet", buffer.getvalue())
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/pq", tier_config(warm=None), shuffle=False)
    assert len(dataset.manifest.blocks) == 2
    rows = {row.pop("i"): row for row, _label in dataset}
    assert sorted(rows) == [0, 1, 2, 3]
    return rows


def test_parquet_list_types_depend_only_on_the_schema(bucket, tier_config, make_dataset):
    """Case B46. Nullable elements: every row is values + validity mask, nulls or not, big integers exact."""
    big = 2**53 + 1
    table = pa.table({"i": pa.array([0, 1, 2, 3]),
                      "v": pa.array([[big, 1], [2, None], [3, 4], [5, 6]], type=pa.list_(pa.int64())),
                      "f": pa.array([[0.5, 1.5], [2.5, 3.5], [None, 4.5], [5.5, 6.5]], type=pa.list_(pa.float32(), 2))})
    assert table.schema.field("v").type.value_field.nullable  # pyarrow's default
    rows = parquet_rows(bucket, make_dataset, tier_config, table)
    for row in rows.values():  # one type per column, in the row group with a null and in the one without
        for column, dtype in (("v", torch.int64), ("f", torch.float32)):
            assert set(row[column]) == {"values", "valid"}
            assert row[column]["values"].dtype == dtype and row[column]["valid"].dtype == torch.bool
    assert rows[0]["v"]["values"].tolist() == [big, 1]  # exact, not rounded through float64
    assert rows[0]["v"]["valid"].tolist() == [True, True]
    assert rows[1]["v"]["values"].tolist() == [2, 0] and rows[1]["v"]["valid"].tolist() == [True, False]  # explicit
    assert rows[2]["v"]["values"].tolist() == [3, 4] and rows[3]["v"]["values"].tolist() == [5, 6]
    assert rows[2]["f"]["valid"].tolist() == [False, True] and rows[2]["f"]["values"].tolist() == [0.0, 4.5]
    batch, _labels = tierload.collate([(rows[i], -1) for i in range(4)])
    assert batch["v"]["values"].shape == (4, 2) and batch["v"]["values"][0, 0].item() == big
    assert batch["v"]["valid"].tolist() == [[True, True], [True, False], [True, True], [True, True]]


def test_parquet_lists_with_non_nullable_elements_are_tensors(bucket, tier_config, make_dataset):
    """Case B46. Elements declared not nullable: every row an exact int64 tensor; a null list is None."""
    big = 2**53 + 1
    item = pa.field("item", pa.int64(), nullable=False)
    table = pa.table({"i": pa.array([0, 1, 2, 3]),
                      "v": pa.array([[big, 1], None, [3, 4], [5, 6, 7]], type=pa.list_(item))})
    rows = parquet_rows(bucket, make_dataset, tier_config, table)
    assert rows[1]["v"] is None  # the null list is explicit
    for i in (0, 2, 3):
        assert isinstance(rows[i]["v"], torch.Tensor) and rows[i]["v"].dtype == torch.int64
    assert rows[0]["v"].tolist() == [big, 1]
    assert rows[2]["v"].tolist() == [3, 4] and rows[3]["v"].tolist() == [5, 6, 7]
