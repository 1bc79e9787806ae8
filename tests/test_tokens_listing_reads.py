"""The tokens layout's listing reads (issue 23 item 1, at scale): each ``.npy`` header, each Megatron
``.idx`` and each window's tokens carried over a file boundary is one small GET, and they are in
flight together (a corpus of thousands of files at 20 ms a GET would otherwise list for minutes).
Counted at the proxy in front of moto (tests/faulty_s3.py: the most GETs it answered at once, with
every GET held 0.2 s before it is forwarded); the windows are checked against numpy.
Real moto S3 over HTTP behind a real proxy; no Ray needed.
"""

from __future__ import annotations

import numpy as np
import torch
from test_layout_tokens import WIDTH, npy_bytes

from tierload.config.loading import load_config
from tierload.data.cold_read import read_cold
from tierload.data.manifest_build import build_manifest
from tierload.stores.cold.source import ColdSource

FILES = 24


def test_headers_and_carried_tokens_are_read_concurrently(bucket, s3, faulty_s3, tmp_path):
    name, fs = bucket
    stream = np.arange(FILES * 21, dtype=np.uint16)  # 21 tokens a file: every window crosses a boundary
    fs.pipe({f"{name}/tok/part-{i:03d}.npy": npy_bytes(part) for i, part in enumerate(np.split(stream, FILES))})
    fs.invalidate_cache()
    options = {**s3.storage_options, "client_kwargs": {"endpoint_url": faulty_s3.endpoint_url,
                                                       "region_name": "us-east-1"}}
    config = load_config({"cold": {"storage_options": options},
                          "manifest": {"cache_dir": str(tmp_path / "m"), "layout": "tokens", "seq_len_tokens": 15}})
    source = ColdSource(f"s3://{name}/tok", config.cold)
    faulty_s3.faults.first_byte_s = 0.2
    manifest = build_manifest(source, config.manifest)
    faulty_s3.faults.first_byte_s = 0.0
    headers = sum(count for key, count in faulty_s3.faults.gets.items() if key.startswith("tok/"))
    assert headers >= FILES + len(manifest.extra["carries"])  # a header a file, a read per carry
    assert faulty_s3.faults.max_open_gets >= 4, faulty_s3.faults.max_open_gets  # 1 when read one after another
    decoder = manifest.decoder()
    windows = [window for index, block in enumerate(manifest.blocks)
               for window, _ in decoder.decode(index, read_cold(source, block))]
    expected = stream[:len(stream) // WIDTH * WIDTH].astype(np.int64).reshape(-1, WIDTH)
    assert np.array_equal(torch.stack(windows).numpy(), expected)
