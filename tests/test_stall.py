"""Data-stall accounting: dataset.stall_stats() and tierload.watch() against the benchmark's own
figure (tierload_tools.bench.loop.run_epochs) over an emulated slow S3, and the end-of-epoch line."""

from __future__ import annotations

import logging

import pytest
from helpers import put_indexed_objects
from torch.utils.data import DataLoader

import tierload
from tierload.loader.stall import StallMeter, batch_length, watch
from tierload_tools.bench.emulated_s3 import EmulatedS3, LinkSettings
from tierload_tools.bench.loop import run_epochs
from tierload_tools.bench.workload import Dataset, Workload


def test_meter_splits_time_between_next_and_the_loop_body():
    import time

    def slow():
        for i in range(5):
            time.sleep(0.02)  # the loader making the item: stall
            yield [i, i], [0, 0]  # (samples, labels): a batch of 2

    meter = StallMeter()
    wrapped = watch(_Iterable(slow), dataset=None)
    for _ in wrapped:
        time.sleep(0.02)  # the step: not stall
    epoch = wrapped.meter.stats()["epochs"][0]
    assert epoch["batches"] == 5 and epoch["samples"] == 10
    assert 0.35 < epoch["stall_fraction"] < 0.65
    assert meter.stats()["total"]["seconds"] == 0  # another meter saw nothing


def test_progress_reports_carry_the_running_epoch():
    import time

    def slow():
        for i in range(6):
            time.sleep(0.02)
            yield i

    seen = []
    meter = StallMeter(on_progress=lambda epoch: seen.append((epoch.batches, epoch.stall_s)), progress_interval_s=0.03)
    assert list(meter.timed(slow(), epoch=3)) == list(range(6))
    assert seen and all(0 < batches <= 6 and stall_s > 0 for batches, stall_s in seen)
    assert meter.stats()["epochs"][0]["samples"] == 6 and meter.current is None


class _Iterable:
    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return self.make()


def test_batch_length_reads_common_batch_shapes():
    import torch

    assert batch_length((torch.zeros(3, 2), torch.zeros(3))) == 3
    assert batch_length({"image": torch.zeros(4, 2)}) == 4
    assert batch_length(torch.zeros(6, 1)) == 6
    assert batch_length(object()) == 1


@pytest.fixture
def slow_s3(s3):
    with EmulatedS3(s3.endpoint_url, LinkSettings(latency_ms=40, connection_mb_s=0, total_mb_s=0)) as proxy:
        yield proxy


def test_stall_stats_agree_with_the_benchmark_within_two_points(bucket, tier_config, make_dataset, slow_s3, caplog):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/st", 96, size=8192, classes=2)
    config = tier_config(warm=None, hot="400KiB", prefetch={"depth_blocks": 4})
    dataset = make_dataset(f"s3://{name}/st", config, layout="files", batch_size=8, endpoint_url=slow_s3.endpoint_url)
    keys = sorted(fs.find(f"{name}/st"))
    info = Dataset(bucket=name, prefix="st", keys=keys, sizes=[8192] * len(keys), labels=[0] * len(keys))
    workload = Workload(samples=96, sample_kib=8, epochs=2, batch_size=8, num_workers=2, step_ms=10.0)

    def for_epoch(epoch):
        dataset.set_epoch(epoch)
        return tierload.watch(DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=tierload.collate))

    with caplog.at_level(logging.INFO, logger="tierload.loader.stall"):
        rows = run_epochs(workload, info, slow_s3.endpoint_url, for_epoch)
    ours = dataset.stall_stats()
    assert [row["epoch"] for row in ours["epochs"]] == [0, 1]
    for bench, mine in zip(rows, ours["epochs"], strict=True):
        assert mine["samples"] == bench["samples"] == 96
        assert abs(mine["stall_fraction"] - bench["stall_fraction"]) <= 0.02, (bench, mine)
    assert ours["epochs"][0]["stall_fraction"] > 0.1  # the cold epoch waited on the slow link: not vacuous
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert len(lines) == 2 and "stall" in lines[0] and "hits hot" in lines[0] and "S3" in lines[0]


def test_iterating_in_the_main_process_measures_itself(bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/mp", 20, size=1024)
    dataset = make_dataset(f"s3://{name}/mp", tier_config(warm=None), layout="files")
    assert sum(1 for _ in DataLoader(dataset, batch_size=4, collate_fn=tierload.collate)) == 5
    assert sum(1 for _ in dataset) == 20
    epochs = dataset.stall_stats()["epochs"]
    assert [e["samples"] for e in epochs] == [20, 20]
    assert all(0 < e["stall_s"] <= e["seconds"] for e in epochs)
    watched = watch(DataLoader(dataset, batch_size=4, collate_fn=tierload.collate))
    assert len(watched) == 5 and sum(len(labels) for _, labels in watched) == 20
    assert [e["samples"] for e in dataset.stall_stats()["epochs"]] == [20, 20, 20]  # counted once, not twice
