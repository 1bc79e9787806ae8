"""A WebDataset sample that holds one field twice (issue 26, item 8).

``dir/base.txt`` ("first"), ``dir/base.json``, ``dir/base.txt`` ("second") in one shard used to
yield one sample whose ``txt`` was "second": the shard's first copy was dropped without a word.
The shard is a real tar file on the local S3 server (moto over HTTP) read through ``TieredDataset``
with a real local Ray; the decoder alone is also fed the same real tar bytes.
"""

from __future__ import annotations

import pytest
from helpers import tar_of

from tierload.data.layouts.webdataset import WebDatasetDecoder
from tierload.errors import DecodeError

REPEATED = [("dir/base.txt", b"first"), ("dir/base.json", b'{"n": 1}'), ("dir/base.txt", b"second"),
            ("dir/other.txt", b"fine")]


def test_a_repeated_field_through_the_dataset_is_a_decode_error_naming_shard_and_field(bucket, tier_config,
                                                                                       make_dataset):
    name, fs = bucket
    fs.pipe_file(f"{name}/wds/shard-0.tar", tar_of(REPEATED))
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/wds", tier_config(warm=None), layout="webdataset", shuffle=False)
    assert dataset.manifest.num_samples == 2  # dir/base and dir/other
    with pytest.raises(DecodeError) as caught:
        list(dataset)
    text = str(caught.value)
    assert "'txt'" in text and "dir/base" in text and f"s3://{name}/wds/shard-0.tar" in text


def test_the_decoder_refuses_a_repeated_field_whether_or_not_it_decodes_fields():
    data = tar_of(REPEATED)
    for decode in (True, False):
        with pytest.raises(DecodeError, match="'txt' twice") as caught:
            WebDatasetDecoder(decode=decode, shards=["file:///data/shard-7.tar"]).decode(0, data)
        assert caught.value.url == "file:///data/shard-7.tar"
    # The same members without the repeat decode as before.
    samples = WebDatasetDecoder(decode=False).decode(0, tar_of(REPEATED[:2] + REPEATED[3:]))
    assert [s for s, _label in samples] == [{"__key__": "dir/base", "txt": b"first", "json": b'{"n": 1}'},
                                           {"__key__": "dir/other", "txt": b"fine"}]
