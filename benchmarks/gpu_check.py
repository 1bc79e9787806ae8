"""Check tierload's device path on a CUDA machine, standalone (no S3, Ray or moto needed).

    python benchmarks/gpu_check.py            # prints one JSON line per check, then a summary

What it does, with only torch, numpy, xxhash, blake3, zstandard, pydantic, fsspec (and kvikio,
if you want the kvikio paths) importable:

1. Which path ``TieredDataset(device="cuda")`` would take here (:func:`tierload.loader.gpu.choose_path`).
2. Writes hot-tier block files (tierload's block format: 40-byte header + raw payload, the
   checksum keyed as in a deployment) of float32 ``.npy`` rows, 8 x 32 MiB.
3. kvikio path (when kvikio imports): reads each payload straight into GPU memory with
   :class:`tierload.loader.gpu.KvikioBlockReader`, decodes the rows on the GPU with the ``npy`` layout's
   decoder, checks every byte against the source, and times it (GB/s). Runs once with kvikio's
   default mode (GDS if cuFile works here) and once forced into its compatibility mode. The
   reader checks each payload against its keyed checksum (timed with it), and a forged block
   (valid header, the unkeyed checksum of other bytes) must be refused.
4. Pinned path: host read + pinned memory + ``non_blocking`` copy (:func:`tierload.loader.gpu.to_device`),
   checked and timed the same way.

On the lent H200 machine (CUDA 13, torch, CuPy and libcufile present; no kvikio, no pydantic,
no zstandard, no blake3), carry the wheels as the device README says, e.g. from the repository root here::

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
        -d .whl kvikio-cu13 libkvikio-cu13 zstandard blake3 pydantic pydantic-core annotated-types typing-inspection

and run ``python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_check.py`` there.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tierload.data.layouts.npy import NpyDecoder  # noqa: E402
from tierload.errors import IntegrityError  # noqa: E402
from tierload.frames.blockfile import decode_frame, encode_frame  # noqa: E402
from tierload.loader.gpu import KvikioBlockReader, choose_path, kvikio_status, to_device  # noqa: E402

BLOCKS, BLOCK_BYTES, ROW = 8, 32 * 2**20, 256  # rows of 256 float32
SECRET = bytes(range(32))  # a deployment's checksum key


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def make_blocks(root: Path) -> list[tuple[str, Path, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = []
    for index in range(BLOCKS):
        rows = rng.normal(size=(BLOCK_BYTES // (ROW * 4), ROW)).astype(np.float32)
        key = f"gpucheck{index}-{index:032x}"
        path = root / key
        path.write_bytes(encode_frame(key, rows.tobytes(), secret=SECRET))
        out.append((key, path, rows))
    return out


def check_kvikio(blocks, mode: str) -> dict:
    import kvikio.defaults

    if mode == "compat":
        kvikio.defaults.set("compat_mode", kvikio.CompatMode.ON)
    decoder = NpyDecoder({"arrays": [{"descr": "<f4", "row_shape": [ROW]}], "block_array": [0]})
    reader = KvikioBlockReader("cuda")
    torch.cuda.synchronize()
    began = time.perf_counter()
    outputs = []
    for key, path, _rows in blocks:
        data = reader.read(str(path), key, SECRET)
        outputs.append(torch.stack([row for row, _ in decoder.decode(0, data)]))
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    ok = all(torch.equal(out.cpu(), torch.from_numpy(rows))
             for out, (_k, _p, rows) in zip(outputs, blocks, strict=True))
    key, path, rows = blocks[0]
    forged = path.with_name(key + ".forged")
    forged.write_bytes(encode_frame(key, rows.tobytes()[::-1]))  # valid header, unkeyed checksum
    try:
        reader.read(str(forged), key, SECRET)
        refused = False
    except IntegrityError:
        refused = True
    return {"check": f"kvikio-{mode}", "ok": ok and refused, "forged_refused": refused,
            "GBps": round(BLOCKS * BLOCK_BYTES / seconds / 1e9, 2),
            "compat_preferred": bool(kvikio.defaults.is_compat_mode_preferred())}


def check_pinned(blocks) -> dict:
    decoder = NpyDecoder({"arrays": [{"descr": "<f4", "row_shape": [ROW]}], "block_array": [0]})
    torch.cuda.synchronize()
    began = time.perf_counter()
    outputs = []
    for key, path, _rows in blocks:
        raw, _ = decode_frame(key, path.read_bytes(), secret=SECRET)  # the host path verifies the checksum
        rows = torch.stack([row for row, _ in decoder.decode(0, raw)])
        outputs.append(to_device(rows, "cuda"))
    torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    ok = all(torch.equal(out.cpu(), torch.from_numpy(rows))
             for out, (_k, _p, rows) in zip(outputs, blocks, strict=True))
    return {"check": "pinned-copy", "ok": ok, "GBps": round(BLOCKS * BLOCK_BYTES / seconds / 1e9, 2)}


def main() -> int:
    path, reason = choose_path("cuda")
    usable, gds, kv_reason = kvikio_status()
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    emit(check="environment", torch=torch.__version__, cuda=torch.version.cuda,
         device_available=torch.cuda.is_available(), device=name, chosen_path=path, reason=reason,
         kvikio_usable=usable, gds=gds, kvikio_reason=kv_reason)
    if not torch.cuda.is_available():
        emit(check="summary", ok=False, why="no CUDA device: nothing to check here")
        return 1
    results = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIERLOAD_GPU_CHECK_DIR")) as tmp:
        blocks = make_blocks(Path(tmp))
        results.append(check_pinned(blocks))
        emit(**results[-1])
        if usable:
            for mode in ("default", "compat"):
                try:
                    results.append(check_kvikio(blocks, mode))
                except Exception as exc:  # noqa: BLE001 - report and go on
                    results.append({"check": f"kvikio-{mode}", "ok": False, "error": f"{type(exc).__name__}: {exc}"})
                emit(**results[-1])
    emit(check="summary", ok=all(r["ok"] for r in results), chosen_path=path,
         paths_checked=[r["check"] for r in results])
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
