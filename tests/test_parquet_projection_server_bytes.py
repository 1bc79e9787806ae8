"""Parquet column projection counted at the server (issue 23 item 4): a text-only epoch over a file
with a large image column moves <= 5% of the file's bytes out of S3, as the proxy in front of moto
counts them (tests/faulty_s3.py, the bytes of every GET body it answers), not as tierload's own
counters say; the projected blocks are cached (a second epoch moves nothing) and tierload's
``cold_bytes`` agrees with the proxy.

Real moto S3 over HTTP behind a real proxy, a real local Ray, real tier directories.
"""

from __future__ import annotations

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
from torch.utils.data import DataLoader

from tierload import collate

ROWS = 240
IMAGE_BYTES = 16 * 1024


def test_text_only_epoch_moves_at_most_5_percent_of_the_file_through_the_proxy(bucket, s3, faulty_s3,
                                                                                tier_config, make_dataset):
    name, fs = bucket
    table = pa.table({"id": list(range(ROWS)),
                      "image": [i.to_bytes(4, "little") + os.urandom(IMAGE_BYTES - 4) for i in range(ROWS)],
                      "text": [f"caption of image {i}" for i in range(ROWS)]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=40)  # 6 row groups, the image chunks between the others
    file_bytes = len(buffer.getvalue())
    key = "captions/part-0.parquet"
    fs.pipe_file(f"{name}/{key}", buffer.getvalue())
    fs.invalidate_cache()
    options = {**s3.storage_options, "client_kwargs": {"endpoint_url": faulty_s3.endpoint_url,
                                                       "region_name": "us-east-1"}}
    served = faulty_s3.faults.get_bytes
    text = make_dataset(f"s3://{name}/captions", tier_config(warm=None), columns=["text"], batch_size=8,
                        storage_options=options)
    listing = served[key]  # the footer's tail (one ranged GET), read by the manifest build
    assert 0 < listing <= 64 * 1024

    texts = []
    for epoch in range(2):
        text.set_epoch(epoch)
        for batch, _labels in DataLoader(text, batch_size=8, num_workers=2, collate_fn=collate):
            assert set(batch) == {"text"}
            texts.extend(batch["text"])
        if epoch == 0:
            epoch_bytes = served[key] - listing
    assert sorted(texts) == sorted(2 * [f"caption of image {i}" for i in range(ROWS)])
    assert 0 < epoch_bytes <= 0.05 * file_bytes, (epoch_bytes, file_bytes)
    assert listing + epoch_bytes <= 0.05 * file_bytes  # the listing included
    assert text.epoch_stats(0)["cold_bytes"] == epoch_bytes  # our counter says what the server saw
    assert served[key] == listing + epoch_bytes  # epoch 1 from the cache: not one byte more from S3
    assert faulty_s3.faults.gets[key] >= 1 + len(text.manifest.blocks)  # one ranged GET (at least) per block
