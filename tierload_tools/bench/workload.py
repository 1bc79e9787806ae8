"""The benchmark workload: what is read, how, and the images it is made of.

The samples are real JPEG encodings of scikit-learn's 8x8 digits, upscaled (bilinear), tinted
per class and overlaid with pixel noise, so each file is about ``sample_kib`` KiB and decoding
one costs what decoding a photo of that size costs (libjpeg-turbo through PIL; ~9 ms for a
256 KiB file on one core here). They are stored as an image folder, ``<prefix>/<label>/<n>.jpg``.

This module is imported by contender subprocesses (possibly from the peers' environment), so
at the top it imports only the standard library, numpy, PIL and torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

BUCKET = "tierload-bench"
PREFIX = "raw"
JPEG_QUALITY = 90
NOISE = 40            # +- uniform pixel noise; makes the JPEGs as incompressible as photos
_CALIBRATION_SIDE = 640


@dataclass(frozen=True)
class Workload:
    """What a benchmark run reads and how (the same for every contender).

    Attributes:
        samples: Images in the dataset.
        sample_kib: Target size of one JPEG in KiB (actual sizes vary by a few percent).
        epochs: Epochs per contender.
        hot_fraction: Node-local cache capacity as a fraction of the dataset's bytes (tierload's
            hot tier, Streaming's ``cache_limit``, LitData's ``max_cache_size``).
        batch_size: DataLoader batch size.
        num_workers: DataLoader worker processes.
        step_ms: Simulated compute time per training step (one batch), in milliseconds; the loop
            sleeps, so it costs no CPU.
        seed: Shuffle and image seed.
    """

    samples: int = 4000
    sample_kib: int = 256
    epochs: int = 3
    hot_fraction: float = 0.25
    batch_size: int = 32
    num_workers: int = 4
    step_ms: float = 20.0
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.samples < 1:
            problems.append(f"samples={self.samples} (need >= 1)")
        if self.sample_kib < 4:
            problems.append(f"sample_kib={self.sample_kib} (need >= 4)")
        if self.epochs < 1:
            problems.append(f"epochs={self.epochs} (need >= 1)")
        if not 0 < self.hot_fraction <= 1:
            problems.append(f"hot_fraction={self.hot_fraction} (need 0 < f <= 1)")
        if self.batch_size < 1 or self.num_workers < 0 or self.step_ms < 0:
            problems.append(f"batch_size={self.batch_size}, num_workers={self.num_workers}, "
                            f"step_ms={self.step_ms} (need >= 1, >= 0, >= 0)")
        if problems:
            raise ValueError("invalid workload: " + "; ".join(problems))

    @classmethod
    def quick(cls) -> "Workload":
        """The CI smoke workload: small enough for ``tierload bench --quick`` on 2 cores."""
        return cls(samples=384, sample_kib=64, epochs=2, num_workers=2)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def data_key(self) -> str:
        """Identifies the generated images (everything that changes their bytes)."""
        blob = json.dumps({"n": self.samples, "kib": self.sample_kib, "seed": self.seed, "q": JPEG_QUALITY,
                           "noise": NOISE, "v": 1}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]


@dataclass
class Dataset:
    """The generated dataset as uploaded: one object per sample.

    Attributes:
        bucket: S3 bucket.
        prefix: Key prefix of the image folder.
        keys: Object key of each sample (no bucket).
        sizes: Bytes of each object.
        labels: Class of each sample.
    """

    bucket: str
    prefix: str
    keys: list[str]
    sizes: list[int]
    labels: list[int]

    @property
    def total_bytes(self) -> int:
        return int(sum(self.sizes))

    @property
    def mean_sample_bytes(self) -> float:
        return self.total_bytes / max(1, len(self.sizes))

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Dataset":
        return cls(**data)


# ------------------------------------------------------------------------------------ images
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return np.round(digits.images * (255.0 / 16.0)).astype(np.uint8), digits.target.astype(np.int64)


def _encode(digit: np.ndarray, label: int, side: int, rng: np.random.Generator) -> bytes:
    gray = np.asarray(Image.fromarray(digit).resize((side, side), Image.Resampling.BILINEAR), dtype=np.int16)
    tint = (label * 25) % 256
    rgb = np.stack([gray, (gray * 3) // 4 + tint // 4, 255 - gray], axis=-1)
    rgb += rng.integers(-NOISE, NOISE + 1, rgb.shape, dtype=np.int16)
    buffer = io.BytesIO()
    Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def _side_for(target_bytes: int, digits: np.ndarray, labels: np.ndarray) -> int:
    """Image side (pixels, multiple of 16) whose JPEGs come out near ``target_bytes``."""
    rng = np.random.default_rng(0)
    sample = [len(_encode(digits[i], int(labels[i]), _CALIBRATION_SIDE, rng)) for i in range(8)]
    side = _CALIBRATION_SIDE * (target_bytes / float(np.mean(sample))) ** 0.5
    return max(16, int(round(side / 16)) * 16)


def _encode_range(args: tuple[int, int, int, int]) -> list[bytes]:
    start, stop, side, seed = args
    digits, labels = _digits()
    out = []
    for i in range(start, stop):
        rng = np.random.default_rng([seed, i])
        out.append(_encode(digits[i % len(digits)], int(labels[i % len(labels)]), side, rng))
    return out


def generate(workload: Workload, cache_dir: str | os.PathLike | None = None,
             processes: int | None = None) -> tuple[list[bytes], list[int]]:
    """The workload's JPEGs and labels, generated once and cached on disk.

    Args:
        workload: Which images (count, size, seed).
        cache_dir: Where to keep the generated bytes (default ``~/.cache/tierload/bench``).
        processes: Encoder processes (default: all cores).

    Returns:
        ``(jpegs, labels)``: one ``bytes`` and one int per sample.
    """
    cache = Path(cache_dir or Path.home() / ".cache" / "tierload" / "bench").expanduser()
    blob_path, index_path = cache / f"images-{workload.data_key()}.bin", cache / f"images-{workload.data_key()}.json"
    digits, labels = _digits()
    sample_labels = [int(labels[i % len(labels)]) for i in range(workload.samples)]
    if blob_path.exists() and index_path.exists():
        sizes = json.loads(index_path.read_text())["sizes"]
        blob = blob_path.read_bytes()
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if len(sizes) == workload.samples and int(offsets[-1]) == len(blob):
            return [blob[offsets[i]:offsets[i + 1]] for i in range(len(sizes))], sample_labels
    side = _side_for(workload.sample_kib * 1024, digits, labels)
    processes = processes or os.cpu_count() or 1
    step = -(-workload.samples // (processes * 4))
    ranges = [(s, min(s + step, workload.samples), side, workload.seed) for s in range(0, workload.samples, step)]
    if processes > 1 and len(ranges) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes) as pool:
            chunks = list(pool.map(_encode_range, ranges))
    else:
        chunks = [_encode_range(r) for r in ranges]
    jpegs = [jpeg for chunk in chunks for jpeg in chunk]
    cache.mkdir(parents=True, exist_ok=True)
    tmp = blob_path.with_suffix(".tmp")
    tmp.write_bytes(b"".join(jpegs))
    os.replace(tmp, blob_path)
    index_path.write_text(json.dumps({"sizes": [len(j) for j in jpegs], "side": side}))
    return jpegs, sample_labels


def upload(fs, jpegs: list[bytes], labels: list[int], bucket: str = BUCKET, prefix: str = PREFIX,
           threads: int = 16) -> Dataset:
    """Write the images as an image folder ``<bucket>/<prefix>/<label>/<n>.jpg`` through ``fs``."""
    from concurrent.futures import ThreadPoolExecutor

    keys = [f"{prefix}/{label}/{i:06d}.jpg" for i, label in enumerate(labels)]

    def put(i: int) -> None:
        fs.pipe_file(f"{bucket}/{keys[i]}", jpegs[i])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(len(keys))))
    return Dataset(bucket, prefix, keys, [len(j) for j in jpegs], list(labels))


# ------------------------------------------------------------------------------- decoding
def decode_jpeg_array(data: bytes) -> np.ndarray:
    """JPEG bytes -> uint8 array (3, H, W), C-contiguous, without importing torch: Ray Data's read
    tasks decode with it in Ray workers, which would otherwise each import torch (~2 CPU-s) for a
    transpose."""
    with Image.open(io.BytesIO(data)) as opened:
        image = opened if opened.mode == "RGB" else opened.convert("RGB")
        array = np.asarray(image, dtype=np.uint8)
    return np.ascontiguousarray(array.transpose(2, 0, 1))


def decode_jpeg(data: bytes):
    """JPEG bytes -> uint8 tensor (3, H, W), the way tierload's image layout decodes."""
    import torch

    return torch.from_numpy(decode_jpeg_array(data))
