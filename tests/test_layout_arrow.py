"""Arrow IPC files and streams read in place (issue 23 item 3): record batches are blocks, rows
are samples, ``columns=`` selects; Hugging Face ``datasets`` shards included.

Real moto S3 over HTTP and real files (file://), a real local Ray, real tier directories.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
import torch

from tierload.errors import ConfigError

ROWS = 200
VEC = pa.list_(pa.field("item", pa.float32(), nullable=False))


def table(start: int = 0, rows: int = ROWS) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table({"id": ids, "text": [f"row {i} " + "z" * (i % 50) for i in ids],
                     "vec": pa.array([[float(i), -float(i)] for i in ids], type=VEC),
                     "label": [i % 4 for i in ids]})


def write_ipc(kind: str, data: pa.Table, batch_rows: int) -> bytes:
    sink = pa.BufferOutputStream()
    opener = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
    with opener(sink, data.schema) as writer:
        for batch in data.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def check_rows(dataset, start: int, rows: int, columns: set[str]) -> None:
    seen = []
    for row, label in dataset:
        assert set(row) == columns
        i = row["id"]
        assert label == i % 4  # manifest.label_column ("label") moved into the label
        assert row["text"] == f"row {i} " + "z" * (i % 50)
        if "vec" in columns:
            assert torch.equal(row["vec"], torch.tensor([float(i), -float(i)]))
        seen.append(i)
    assert sorted(seen) == list(range(start, start + rows))


@pytest.mark.parametrize("kind", ["stream", "file"])
def test_record_batches_are_blocks_and_rows_are_samples(bucket, tier_config, make_dataset, kind):
    name, fs = bucket
    fs.pipe_file(f"{name}/ipc/part-0.arrow", write_ipc(kind, table(0), batch_rows=25))
    fs.pipe_file(f"{name}/ipc/part-1.arrow", write_ipc(kind, table(ROWS, 77), batch_rows=30))
    fs.invalidate_cache()
    config = tier_config(warm=None, manifest={"block_bytes": "4KiB"})
    dataset = make_dataset(f"s3://{name}/ipc", config)
    manifest = dataset.manifest
    assert manifest.layout == "arrow" and manifest.num_samples == ROWS + 77
    assert len(manifest.blocks) > 4  # several batches per block, several blocks per file
    check_rows(dataset, 0, ROWS + 77, {"id", "text", "vec"})
    assert dataset.epoch_stats(0)["cold_bytes"] == manifest.total_bytes

    narrow = make_dataset(f"s3://{name}/ipc", config, columns=["id", "text"])
    check_rows(narrow, 0, ROWS + 77, {"id", "text"})


def test_datasets_save_to_disk_shards(tmp_path, tier_config, make_dataset):
    datasets = pytest.importorskip("datasets")
    source = tmp_path / "hf"
    hf = datasets.Dataset.from_dict(table(0).drop_columns(["vec"]).to_pydict())
    hf.save_to_disk(str(source), max_shard_size="8KB")
    assert len(list(source.glob("*.arrow"))) > 1
    dataset = make_dataset(f"file://{source}", tier_config(warm=None, manifest={"block_bytes": "2KiB"}), layout="arrow",
                           storage_options={})
    assert all(url.endswith(".json") for url in dataset.manifest.skipped)  # state.json, dataset_info.json
    check_rows(dataset, 0, ROWS, {"id", "text"})


def test_unknown_column_is_a_config_error(tmp_path, tier_config, make_dataset):
    source = tmp_path / "typo"
    source.mkdir()
    (source / "a.arrow").write_bytes(write_ipc("stream", table(0, 10), batch_rows=5))
    with pytest.raises(ConfigError, match=r"\['txt'\].*'text'"):
        make_dataset(f"file://{source}", tier_config(warm=None), columns=["txt"], storage_options={})
