"""Parquet column projection at I/O (issue 23 item 4): with ``columns=``, only those columns'
chunks leave the cold tier, as blocks of byte ranges whose keys include the projection.

Real moto S3 over HTTP, a real local Ray, real tier directories; nothing mocked.
"""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from tierload import collate
from tierload.errors import ConfigError

ROWS = 240
IMAGE_BYTES = 16 * 1024


def image_of(i: int) -> bytes:
    return i.to_bytes(4, "little") + os.urandom(IMAGE_BYTES - 4)  # incompressible, like JPEG bytes


def write_images_and_text(fs, url: str) -> tuple[dict[int, bytes], int]:
    images = {i: image_of(i) for i in range(ROWS)}
    table = pa.table({"id": list(range(ROWS)), "image": [images[i] for i in range(ROWS)],
                      "text": [f"caption of image {i}" for i in range(ROWS)]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=40)  # 6 row groups
    fs.pipe_file(url, buffer.getvalue())
    fs.invalidate_cache()
    return images, len(buffer.getvalue())


def rows_of(dataset) -> list[dict]:
    rows = []
    for batch, _labels in DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=collate):
        rows.extend(dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True))
    return rows


def test_text_only_epoch_reads_only_the_text_chunks_from_cold(bucket, tier_config, make_dataset):
    name, fs = bucket
    images, file_bytes = write_images_and_text(fs, f"{name}/captions/part-0.parquet")
    url = f"s3://{name}/captions"
    config = tier_config(warm=None)
    text = make_dataset(url, config, columns=["text"], batch_size=8)
    rows = rows_of(text)
    assert sorted(row["text"] for row in rows) == sorted(f"caption of image {i}" for i in range(ROWS))
    assert all(set(row) == {"text"} for row in rows)
    cold = text.epoch_stats(0)
    assert cold["cold_bytes"] <= 0.05 * file_bytes, (cold["cold_bytes"], file_bytes)
    assert cold["cold_bytes"] == text.manifest.total_bytes  # every projected block read once, nothing else
    assert len(text.manifest.blocks) == 6

    # Another projection on the same node cache: its own keys, never the text blocks' cache entries.
    both = make_dataset(url, config, columns=["id", "image"], batch_size=8)
    assert not {b.key for b in both.manifest.blocks} & {b.key for b in text.manifest.blocks}
    got = rows_of(both)
    assert sorted(int(row["id"]) for row in got) == list(range(ROWS))
    assert all(row["image"] == images[int(row["id"])] for row in got)
    assert both.epoch_stats(0)["cold_bytes"] == both.manifest.total_bytes > 0.9 * file_bytes

    # All columns: the plain row-group blocks, unchanged (the manifest the listing cached).
    whole = make_dataset(url, config, columns=["id", "image", "text"], batch_size=8)
    assert all(b.members is None for b in whole.manifest.blocks)
    assert whole.manifest.dataset_id not in {text.manifest.dataset_id, both.manifest.dataset_id}


def test_unknown_column_is_a_config_error_naming_it(bucket, tier_config, make_dataset):
    name, fs = bucket
    write_images_and_text(fs, f"{name}/typo/part-0.parquet")
    with pytest.raises(ConfigError, match=r"\['txet'\].*\['id', 'image', 'text'\]"):
        make_dataset(f"s3://{name}/typo", tier_config(warm=None), columns=["txet"])
