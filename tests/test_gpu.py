"""Output to the accelerator: pin_memory, device="cuda", and the kvikio/GDS path.

The host path always runs. The CUDA tests run only where torch sees a CUDA device, the kvikio
test only where kvikio is installed too; elsewhere they are skipped with the reason. On a CUDA
machine without this suite's S3/Ray dependencies, ``benchmarks/gpu_check.py`` runs the same
checks of the device path standalone.
"""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tierload import collate
from tierload.frames.blockfile import encode_frame
from tierload.loader.gpu import choose_path, kvikio_status, to_device

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device visible to torch on this machine: the GPU path "
                                                 "is checked on a CUDA machine (benchmarks/gpu_check.py)")
KVIKIO_USABLE, _, KVIKIO_REASON = kvikio_status()
needs_kvikio = pytest.mark.skipif(not KVIKIO_USABLE, reason=f"kvikio path unavailable: {KVIKIO_REASON}")


@pytest.fixture
def npy_dataset(bucket, tier_config, make_dataset):
    name, fs = bucket
    rows = np.arange(40 * 6, dtype=np.float32).reshape(40, 6)
    buffer = io.BytesIO()
    np.save(buffer, rows)
    fs.pipe_file(f"{name}/npy/x.npy", buffer.getvalue())
    fs.invalidate_cache()

    def make(**kwargs):
        return make_dataset(f"s3://{name}/npy", tier_config(manifest={"block_bytes": 96}), batch_size=8, **kwargs)
    return make, rows


def test_pin_memory_loader_yields_the_same_batches(npy_dataset):
    make, rows = npy_dataset
    dataset = make()
    got = []
    for batch, labels in DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=collate, pin_memory=True):
        assert batch.shape == (8, 6) and labels.shape == (8,)
        assert batch.is_pinned() == CUDA  # pinned where an accelerator exists; a no-op (and warning) elsewhere
        got.extend(batch.tolist())
    assert sorted(got) == rows.tolist()


def test_device_path_is_chosen_at_run_time_logged_once_and_reported(npy_dataset, caplog):
    make, rows = npy_dataset
    dataset = make(device="cuda")
    expected = choose_path("cuda")[0]
    assert dataset.device_path == expected
    if not CUDA:
        assert expected == "cpu" and "CUDA is not available" in choose_path("cuda")[1]
    with caplog.at_level(logging.INFO, logger="tierload.loader.gpu"):
        samples = [sample for sample, _ in dataset] + [sample for sample, _ in dataset]
    lines = [r.getMessage() for r in caplog.records if "tierload output path" in r.getMessage()]
    assert len(lines) == 1 and expected in lines[0]
    assert dataset.cache_stats()["device_path"] == expected
    assert all(s.device.type == ("cuda" if CUDA else "cpu") for s in samples)
    assert sorted(s.cpu().tolist() for s in samples[:40]) == rows.tolist()


def test_to_device_moves_nested_tensors_and_leaves_the_rest():
    batch = {"x": torch.ones(2), "meta": [b"raw", "txt", 3], "pair": (torch.zeros(1), None)}
    moved = to_device(batch, "cpu")
    assert torch.equal(moved["x"], batch["x"]) and moved["meta"] == [b"raw", "txt", 3]
    assert moved["pair"][1] is None
    assert choose_path(None) == ("cpu", "no device requested")


def test_a_raw_files_sample_becomes_a_uint8_tensor_on_the_device_whatever_path_read_it():
    """A ``files`` sample read on the host (bytes) must have the type a kvikio hit has (a uint8
    tensor on the device): one epoch mixes misses and hits."""
    from tierload.loader.gpu import sample_to_device

    for raw in (b"", b"\x00\xffab", bytearray(b"xyz"), memoryview(b"0123")[1:3]):
        moved = sample_to_device(raw, "cpu")
        assert isinstance(moved, torch.Tensor) and moved.dtype == torch.uint8 and moved.shape == (len(raw),)
        assert moved.numpy().tobytes() == bytes(raw)
    tensor = torch.arange(3)
    assert sample_to_device(tensor, "cpu") is tensor


@needs_cuda
def test_a_files_dataset_on_cuda_yields_uint8_gpu_tensors_for_misses_and_hits(bucket, tier_config, make_dataset):
    name, fs = bucket
    objects = {f"{name}/raw/c{i % 3}/{i:03d}.bin": bytes([i]) * (i % 5) for i in range(30)}  # zero-byte ones too
    fs.pipe(objects)
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/raw", tier_config(manifest={"pack_target_bytes": 16}), layout="files",
                           device="cuda")
    for _epoch in range(2):  # epoch 1 misses (host reads), epoch 2 hits (kvikio where usable)
        got = [sample for sample, _ in dataset]
        assert all(s.is_cuda and s.dtype == torch.uint8 for s in got)
        assert sorted(s.cpu().numpy().tobytes() for s in got) == sorted(objects.values())


@needs_cuda
def test_cuda_device_returns_gpu_tensors_in_the_main_process(npy_dataset):
    make, rows = npy_dataset
    dataset = make(device="cuda")
    got = [sample for sample, _ in dataset]
    assert all(s.is_cuda for s in got)
    assert sorted(s.cpu().tolist() for s in got) == rows.tolist()
    assert dataset.device_path in ("kvikio-gds", "kvikio-compat", "pinned-copy")


@needs_cuda
@needs_kvikio
def test_kvikio_reads_a_hot_block_straight_into_gpu_memory(tmp_path):
    from tierload.data.layouts.npy import NpyDecoder
    from tierload.loader.gpu import KvikioBlockReader

    rows = np.random.default_rng(0).normal(size=(1000, 16)).astype(np.float32)
    key = "block-" + "0" * 32
    path = tmp_path / key
    path.write_bytes(encode_frame(key, rows.tobytes()))
    data = KvikioBlockReader("cuda").read(str(path), key)
    assert data.is_cuda and data.numel() == rows.nbytes
    decoded = NpyDecoder({"arrays": [{"descr": "<f4", "row_shape": [16]}], "block_array": [0]}).decode(0, data)
    assert all(row.is_cuda for row, _ in decoded)
    assert torch.equal(torch.stack([row for row, _ in decoded]).cpu(), torch.from_numpy(rows))


def test_the_device_path_checks_payloads_against_their_keyed_checksum():
    """What KvikioBlockReader does with the bytes it read into device memory (here a CPU tensor:
    the check is the same, a CUDA tensor is first copied to pinned host memory)."""
    from tierload.errors import IntegrityError
    from tierload.frames.blockfile import parse_header
    from tierload.loader.gpu import HostCheck

    secret = bytes(range(32))
    key = "block-" + "0" * 32
    payload = np.arange(4096, dtype=np.float32).tobytes()
    genuine = parse_header(key, encode_frame(key, payload, secret=secret))
    forged = parse_header(key, encode_frame(key, payload[::-1]))  # valid header, unkeyed checksum
    check = HostCheck()
    check.check(key, genuine, torch.frombuffer(bytearray(payload), dtype=torch.uint8), secret)
    with pytest.raises(IntegrityError, match="checksum") as caught:
        check.check(key, forged, torch.frombuffer(bytearray(payload[::-1]), dtype=torch.uint8), secret)
    assert caught.value.tier == "hot"
    with pytest.raises(IntegrityError):  # one flipped byte
        check.check(key, genuine, torch.frombuffer(bytearray(b"\x01" + payload[1:]), dtype=torch.uint8), secret)


@needs_cuda
@needs_kvikio
def test_kvikio_refuses_a_forged_hot_block(tmp_path):
    from tierload.errors import IntegrityError
    from tierload.loader.gpu import KvikioBlockReader

    secret = bytes(range(32))
    rows = np.random.default_rng(0).normal(size=(1000, 16)).astype(np.float32)
    key = "block-" + "0" * 32
    path = tmp_path / key
    path.write_bytes(encode_frame(key, rows.tobytes(), secret=secret))
    reader = KvikioBlockReader("cuda")
    assert torch.equal(reader.read(str(path), key, secret).cpu(), torch.from_numpy(rows.view(np.uint8).ravel()))
    path.write_bytes(encode_frame(key, rows[::-1].tobytes()))  # valid header, unkeyed checksum
    with pytest.raises(IntegrityError):
        reader.read(str(path), key, secret)
