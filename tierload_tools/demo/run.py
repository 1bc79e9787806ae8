"""``tierload demo``: train a small CNN on real data streamed from a local S3 through the tiers.

Everything it starts (a local Ray, moto's S3 server, tier directories) it also stops and
removes. Results go to callbacks, so the CLI decides how to show them.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils.data import DataLoader

from tierload.config.loading import load_config
from tierload.deploy.host import stop_host
from tierload.errors import ConfigError
from tierload.loader.dataset import TieredDataset
from tierload.node.stats import hit_ratios
from tierload_tools.demo.data import load_digits_uint8, upload_imagefolder, upload_parquet
from tierload_tools.demo.model import DigitsCNN, to_input
from tierload_tools.s3local import LocalS3

log = logging.getLogger(__name__)
BUCKET = "tierload-demo"


@dataclass
class EpochResult:
    """What one demo epoch measured.

    Attributes:
        epoch: Epoch number (0-based).
        accuracy: Held-out accuracy after the epoch (0..1).
        samples: Training samples seen.
        seconds: Wall time of the epoch's training loop.
        stall_fraction: Time the loop waited for data / epoch time.
        hit_ratio: Fraction of block accesses served per tier (hot, warm, cold).
        cold_bytes, cold_gets: Read from the cold tier during the epoch.
        wire_ratio: zstd ratio on block bytes sent over the channel (1.0 if none were sent).
    """

    epoch: int
    accuracy: float
    samples: int
    seconds: float
    stall_fraction: float
    hit_ratio: dict
    cold_bytes: int
    cold_gets: int
    wire_ratio: float

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0


def _evaluate(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        correct = int((model(images).argmax(1) == labels).sum())
    model.train()
    return correct / len(labels) if len(labels) else 0.0


def run_demo(layout: str = "imagefolder", epochs: int = 3, num_workers: int = 2, batch_size: int = 16,
             seed: int = 0, on_setup: Callable[[dict], None] | None = None,
             on_batch: Callable[[int, int], None] | None = None,
             on_epoch: Callable[[EpochResult], None] | None = None) -> list[EpochResult]:
    """Run the demo end to end.

    Args:
        layout: ``"imagefolder"`` (PNG files in class folders) or ``"parquet"``.
        epochs: Training epochs.
        num_workers: DataLoader workers.
        batch_size: Training batch size.
        seed: Shuffle and model seed.
        on_setup: Called once with the setup (endpoint, sizes, capacities).
        on_batch: Called after each batch with ``(batches_done, batches_per_epoch)``.
        on_epoch: Called with each epoch's :class:`EpochResult`.

    Raises:
        ConfigError: Unknown layout or non-positive sizes.
    """
    import ray

    if layout not in ("imagefolder", "parquet"):
        raise ConfigError(f"layout={layout!r}; the demo supports imagefolder and parquet")
    if epochs < 1 or num_workers < 0 or batch_size < 1:
        raise ConfigError(f"epochs={epochs}, num_workers={num_workers}, batch_size={batch_size}: "
                          "need epochs >= 1, num_workers >= 0, batch_size >= 1")
    torch.manual_seed(seed)
    workdir = tempfile.mkdtemp(prefix="tierload-demo-")
    ray_was_running = ray.is_initialized()
    config = None
    results: list[EpochResult] = []
    try:
        with LocalS3() as s3:
            fs = s3.create_bucket(BUCKET)
            (train_x, train_y), (test_x, test_y) = load_digits_uint8(seed=seed)
            upload = upload_imagefolder if layout == "imagefolder" else upload_parquet
            train_bytes = upload(fs, f"{BUCKET}/{layout}/train", train_x, train_y)
            # Capacities smaller than the data set, so every tier has to choose.
            config = load_config({
                "hot": {"dir": f"{workdir}/hot", "capacity_bytes": int(train_bytes * 0.3) + 4096},
                "warm": {"url": f"{workdir}/warm", "capacity_bytes": int(train_bytes * 0.6) + 4096},
                "manifest": {"cache_dir": f"{workdir}/manifests"},
                "ray": {"num_cpus": 2},
            })
            train = TieredDataset(f"s3://{BUCKET}/{layout}/train", config, batch_size=batch_size,
                                  storage_options=s3.storage_options, transform=to_input, seed=seed)
            # The held-out split is scored from memory, so it does not compete for the tiers.
            held_out = torch.from_numpy(test_x).unsqueeze(1).float() / 255.0, torch.from_numpy(test_y)
            if on_setup is not None:
                on_setup({"endpoint": s3.endpoint_url, "layout": layout, "train_samples": len(train),
                          "test_samples": len(test_y), "train_bytes": train_bytes,
                          "blocks": len(train.manifest.blocks),
                          "block_bytes": train.manifest.total_bytes,
                          "hot_capacity_bytes": config.hot.capacity_bytes,
                          "warm_capacity_bytes": config.warm.capacity_bytes, "num_workers": num_workers})
            model = DigitsCNN()
            optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
            loss_fn = torch.nn.CrossEntropyLoss()
            for epoch in range(epochs):
                train.set_epoch(epoch)
                loader = DataLoader(train, batch_size=batch_size, num_workers=num_workers)
                batches = len(loader)
                seen, waited, start = 0, 0.0, time.perf_counter()
                iterator = iter(loader)
                for done in range(1, batches + 1):
                    before = time.perf_counter()
                    images, labels = next(iterator)
                    waited += time.perf_counter() - before
                    optimizer.zero_grad()
                    loss_fn(model(images), labels).backward()
                    optimizer.step()
                    seen += len(labels)
                    if on_batch is not None:
                        on_batch(done, batches)
                del iterator
                seconds = time.perf_counter() - start
                accuracy = _evaluate(model, *held_out)
                stats = train.epoch_stats(epoch)
                sent = stats.get("wire_sent_bytes", 0)
                result = EpochResult(epoch, accuracy, seen, seconds, waited / seconds if seconds else 0.0,
                                     hit_ratios(stats), int(stats.get("cold_bytes", 0)),
                                     int(stats.get("cold_gets", 0)),
                                     stats.get("wire_raw_bytes", 0) / sent if sent else 1.0)
                results.append(result)
                if on_epoch is not None:
                    on_epoch(result)
            return results
    finally:
        if ray.is_initialized() and config is not None:
            from tierload.deploy.runtime import stop_actors
            stop_actors(config)
        if ray.is_initialized() and not ray_was_running:
            ray.shutdown()
        stop_host()  # the service host that ran Ray and the cache for this process, if it started one
        shutil.rmtree(workdir, ignore_errors=True)
