"""The ``tokens`` layout (issue 23 items 1 and 5): token files read in place as windows of
``seq_len + 1`` tokens, checked against windows cut with numpy from the same files.

Raw ``.bin`` (uint16, uint32), ``.npy`` (uint16, uint32) and a Megatron-LM ``.bin`` + ``.idx`` pair
whose index the test writes byte by byte from the format's documented layout. Windows that cross
file boundaries (one runs through three files) and windows that do not; the dropped tail; every
window exactly once across 2 ranks x 2 workers on moto's S3 with a real Ray; exact mid-epoch
resumption. Real files and a real S3 server; nothing mocked.
"""

from __future__ import annotations

import io
import json
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tierload import collate
from tierload.config.loading import load_config
from tierload.data.cold_read import read_cold
from tierload.data.manifest_build import build_manifest
from tierload.errors import ConfigError, ManifestError
from tierload.stores.cold.source import ColdSource

SEQ_LEN = 15
WIDTH = SEQ_LEN + 1
BLOCK_BYTES = 64  # two uint16 windows, one uint32 window per block


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def megatron_pair(documents: list[np.ndarray]) -> tuple[bytes, bytes]:
    """``(.bin, .idx)`` of uint16 documents, the index written from Megatron-LM's documented layout:
    magic, version, dtype code, sequence count, document count, sizes int32[], pointers int64[],
    document indices int64[] (little-endian)."""
    sizes = np.array([len(doc) for doc in documents], dtype="<i4")
    pointers = np.zeros(len(documents), dtype="<i8")
    pointers[1:] = np.cumsum(sizes[:-1]) * 2
    doc_idx = np.arange(len(documents) + 1, dtype="<i8")
    index = (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8)  # 8: uint16
             + struct.pack("<Q", len(documents)) + struct.pack("<Q", len(doc_idx))
             + sizes.tobytes() + pointers.tobytes() + doc_idx.tobytes())
    return np.concatenate(documents).astype("<u2").tobytes(), index


def corpus(first_tokens: int = 100) -> dict[str, bytes]:
    """The stream ``0, 1, 2, ...`` over five objects in listing order: a raw uint16 ``.bin``, a
    uint32 ``.npy``, a Megatron pair of 5 tokens (shorter than a window: a window runs from b.npy
    through c.bin into d.npy), a 2-D uint16 ``.npy`` and a file that holds no tokens."""
    a = np.arange(first_tokens, dtype="<u2")
    b = np.arange(first_tokens, first_tokens + 37, dtype=np.uint32)
    c_bin, c_idx = megatron_pair([np.arange(first_tokens + 37, first_tokens + 39),
                                  np.arange(first_tokens + 39, first_tokens + 42)])
    d = np.arange(first_tokens + 42, first_tokens + 97, dtype=np.uint16).reshape(5, 11)
    return {"a.bin": a.tobytes(), "b.npy": npy_bytes(b), "c.bin": c_bin, "c.idx": c_idx, "d.npy": npy_bytes(d),
            "notes.txt": b"not tokens"}


def file_tokens(folder: Path, raw_dtype: str = "<u2") -> list[np.ndarray]:
    """Each token file's tokens as numpy reads them (the reference), in listing order."""
    out = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".npy":
            out.append(np.load(path).ravel())
        elif path.suffix == ".bin":
            dtype = "<u2" if path.with_suffix(".idx").exists() else raw_dtype
            out.append(np.fromfile(path, dtype=dtype))
    return out


def reference_windows(tokens: list[np.ndarray], cross_files: bool) -> np.ndarray:
    """int64 (windows, WIDTH): windows back to back over the stream, or over each file on its own."""
    parts = [np.concatenate(tokens)] if cross_files else tokens
    rows = [part[:len(part) // WIDTH * WIDTH].astype(np.int64).reshape(-1, WIDTH) for part in parts]
    return np.concatenate(rows)


def write(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def manifest_and_windows(folder: Path, tmp_path: Path, **manifest):
    """The manifest of ``folder`` and every sample decoded from its own block, in manifest order."""
    config = load_config({"manifest": {"cache_dir": str(tmp_path / "manifests"), "layout": "tokens",
                                       "seq_len_tokens": SEQ_LEN, "block_bytes": BLOCK_BYTES, **manifest}})
    source = ColdSource(f"file://{folder}", config.cold)
    built = build_manifest(source, config.manifest)
    decoder = built.decoder()
    decoded = [decoder.decode(index, read_cold(source, block)) for index, block in enumerate(built.blocks)]
    samples = [decoded[int(b)][int(i)] for b, i in zip(built.sample_block, built.sample_index, strict=True)]
    assert all(label == -1 for _, label in samples)
    return built, [sample for sample, _ in samples]


def test_windows_cross_file_boundaries_exactly_as_numpy_cuts_the_stream(tmp_path):
    folder = write(tmp_path / "corpus", corpus())
    manifest, windows = manifest_and_windows(folder, tmp_path)
    expected = reference_windows(file_tokens(folder), cross_files=True)
    assert len(expected) == 12 and manifest.num_samples == 12  # 197 tokens: 12 windows of 16
    assert all(w.dtype == torch.int64 and w.shape == (WIDTH,) for w in windows)
    assert np.array_equal(torch.stack(windows).numpy(), expected)
    assert np.array_equal(expected.ravel(), np.arange(192))  # the reference itself is the stream
    assert manifest.extra["tail_tokens"] == 197 - 192
    # Two windows run into the next file(s): a.bin -> b.npy, and b.npy -> c.bin (5 tokens) -> d.npy.
    assert sorted(len(c) for c in manifest.extra["carries"].values()) == [7, 12]
    assert manifest.skipped == {f"file://{folder}/notes.txt": "not a token file (.bin, .npy, or a Megatron-LM "
                                                              ".bin + .idx pair)"}
    # Blocks: byte ranges of one file, aligned to tokens, at most block_bytes, not overlapping.
    for block in manifest.blocks:
        assert 0 < block.length <= BLOCK_BYTES
    ranges = sorted((b.url, b.offset, b.offset + b.length) for b in manifest.blocks)
    assert all(a[0] != b[0] or a[2] <= b[1] for a, b in zip(ranges, ranges[1:], strict=False))


def test_windows_do_not_cross_files_when_turned_off_and_each_files_tail_is_dropped(tmp_path):
    folder = write(tmp_path / "corpus", corpus())
    manifest, windows = manifest_and_windows(folder, tmp_path, token_cross_files=False)
    tokens = file_tokens(folder)
    expected = reference_windows(tokens, cross_files=False)
    assert len(expected) == 6 + 2 + 3 and manifest.num_samples == len(expected)
    assert np.array_equal(torch.stack(windows).numpy(), expected)
    assert manifest.extra["tail_tokens"] == sum(len(t) % WIDTH for t in tokens) == 4 + 5 + 5 + 7
    assert manifest.extra["carries"] == {}
    assert f"file://{folder}/c.bin" in manifest.skipped  # 5 tokens: no window of its own


def test_raw_uint32_bin_by_option_and_input_target_pairs(tmp_path):
    values = np.arange(90, dtype=np.uint32) * 70001  # values beyond uint16
    folder = write(tmp_path / "corpus", {"x.bin": values[:50].astype("<u4").tobytes(),
                                        "y.bin": values[50:].astype("<u4").tobytes()})
    manifest, pairs = manifest_and_windows(folder, tmp_path, token_dtype="uint32", token_output="pair")
    expected = reference_windows(file_tokens(folder, raw_dtype="<u4"), cross_files=True)
    assert len(pairs) == 90 // WIDTH == len(expected)
    for (inputs, targets), window in zip(pairs, expected, strict=True):
        assert inputs.shape == targets.shape == (SEQ_LEN,) and inputs.dtype == targets.dtype == torch.int64
        assert np.array_equal(inputs.numpy(), window[:-1]) and np.array_equal(targets.numpy(), window[1:])
    batch, labels = collate([((i, t), -1) for i, t in pairs[:3]])
    assert isinstance(batch, tuple) and batch[0].shape == batch[1].shape == (3, SEQ_LEN)
    assert labels.tolist() == [-1, -1, -1]


@pytest.mark.parametrize("files, match", [
    ({"x.bin": b"\x00" * 33}, "33 bytes are not a whole number of uint16 tokens; set manifest.token_dtype"),
    ({"x.bin": b"\x00" * 64, "x.idx": b"MMIDIDX\x00\x01" + bytes(40)}, "not a Megatron-LM index"),
    ({"x.npy": npy_bytes(np.zeros(64, dtype=np.float32))}, "dtype float32: tokens are uint16, uint32 or int32"),
    ({"x.bin": b"\x00" * 20}, "make no window of 16 tokens .* lower manifest.seq_len_tokens"),
    ({"x.txt": b"words"}, "no token files"),
])
def test_unreadable_token_files_are_named_with_the_fix(tmp_path, files, match):
    folder = write(tmp_path / "corpus", files)
    with pytest.raises(ManifestError, match=match):
        manifest_and_windows(folder, tmp_path)


def test_token_settings_are_validated():
    assert load_config({"manifest": {"seq_len_tokens": 1}}).manifest.seq_len_tokens == 1
    with pytest.raises(ConfigError, match=r"manifest.seq_len_tokens: Input should be greater than or equal to 1"):
        load_config({"manifest": {"seq_len_tokens": 0}})
    with pytest.raises(ConfigError, match=r"manifest.token_dtype: .*'uint16' or 'uint32'"):
        load_config({"manifest": {"token_dtype": "int8"}})


# ------------------------------------------------------------------ through the tiers
def put_corpus(fs, prefix: str, first_tokens: int) -> np.ndarray:
    fs.pipe({f"{prefix}/{name}": data for name, data in corpus(first_tokens).items()})
    fs.invalidate_cache()
    total = first_tokens + 97
    return np.arange(total // WIDTH * WIDTH, dtype=np.int64).reshape(-1, WIDTH)  # the stream's windows


def window_ids(batches, expected: np.ndarray) -> list[int]:
    """The window index of each yielded window, after checking its tokens against ``expected``."""
    ids = []
    for samples, labels in batches:
        assert samples.dtype == torch.int64 and (labels == -1).all()
        for window in samples:
            index = int(window[0]) // WIDTH
            assert np.array_equal(window.numpy(), expected[index])
            ids.append(index)
    return ids


def token_config(tier_config):
    return tier_config(warm=None, manifest={"layout": "tokens", "seq_len_tokens": SEQ_LEN, "block_bytes": BLOCK_BYTES})


def test_every_window_once_per_epoch_across_two_ranks_and_two_workers(bucket, tier_config, make_dataset):
    name, fs = bucket
    expected = put_corpus(fs, f"{name}/tok", first_tokens=600)  # 697 tokens: 43 windows
    config = token_config(tier_config)
    orders = []
    for epoch in range(2):
        per_rank = []
        for rank in range(2):
            dataset = make_dataset(f"s3://{name}/tok", config, rank=rank, world_size=2, batch_size=4,
                                   drop_last=True)
            assert dataset.manifest.layout == "tokens" and dataset._shuffle_mode() == "block"
            dataset.set_epoch(epoch)
            got = window_ids(DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate), expected)
            assert len(got) == len(dataset) == len(expected) // 2
            per_rank.append(got)
        counts = Counter(per_rank[0] + per_rank[1])
        assert set(counts.values()) == {1} and len(counts) == len(expected) - 1  # drop_last: 43 -> 2 x 21
        orders.append(per_rank[0] + per_rank[1])
    assert orders[0] != orders[1]  # a new epoch is a new order


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resumes_mid_epoch_exactly(bucket, tier_config, make_dataset, num_workers):
    name, fs = bucket
    expected = put_corpus(fs, f"{name}/tok", first_tokens=300)
    config = token_config(tier_config)

    def make():
        return make_dataset(f"s3://{name}/tok", config, seed=3, batch_size=2)

    def loader(dataset, workers):
        return DataLoader(dataset, batch_size=2, num_workers=workers, collate_fn=collate)

    whole = window_ids(loader(make(), 0), expected)
    assert sorted(whole) == list(range(len(expected)))
    dataset = make()
    iterator = iter(loader(dataset, num_workers))
    head = window_ids([next(iterator) for _ in range(3)], expected)
    state = dataset.state_dict() if num_workers == 0 else dataset.state_dict(batches_consumed=3)
    del iterator
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(state)))
    rest = window_ids(loader(resumed, 2 - num_workers), expected)
    assert head + rest == whole


@pytest.mark.parametrize("setting", [{"seq_len_tokens": 31}, {"token_dtype": "uint32"}, {"token_cross_files": False},
                                     {"token_output": "pair"}])
def test_every_token_setting_gives_its_own_cached_manifest(tmp_path, setting):
    from tierload.data.manifest import cache_path

    base = load_config({"manifest": {"cache_dir": str(tmp_path), "layout": "tokens"}})
    source = ColdSource(f"file://{tmp_path}", base.cold)
    changed = base.manifest.model_copy(update=setting)
    assert cache_path(source, changed, None) != cache_path(source, base.manifest, None)


def test_a_block_that_is_not_whole_windows_is_a_decode_error(tmp_path):
    from tierload.errors import DecodeError

    folder = write(tmp_path / "corpus", {"x.bin": np.arange(64, dtype="<u2").tobytes()})
    manifest, _ = manifest_and_windows(folder, tmp_path)
    decoder = manifest.decoder()
    assert len(decoder.decode(0, bytes(BLOCK_BYTES))) == 2
    with pytest.raises(DecodeError, match="not a whole number of windows of 16 tokens"):
        decoder.decode(0, bytes(BLOCK_BYTES - 2))
