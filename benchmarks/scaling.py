"""Measure the numbers docs/scaling.md reasons from (run: python benchmarks/scaling.py).

1. manifest size and load time per million blocks;
2. coordinator work per reported access and per residency change (one sync call, in process);
3. coordinator memory per tracked block (access counter + holder map);
4. the local channel's round trip (a consumer's control call to its node cache).

Each figure is the median of a few repetitions on this machine; it prints JSON.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import time
import tracemalloc

import numpy as np

from tierload.config.loading import load_config
from tierload.coordinator.actor import Coordinator
from tierload.data.blocks import Block
from tierload.data.manifest import Manifest
from tierload.wire.messages import SyncReport


def median_of(fn, repeats=3):
    values = [fn() for _ in range(repeats)]
    return statistics.median(values)


def manifest_per_million() -> dict:
    count = 1_000_000
    blocks = [Block.of(f"s3://bucket/train/{i % 1000}/img-{i:07d}.jpg", f'"{i:032x}"', 0, 110_000)
              for i in range(count)]
    manifest = Manifest(url="s3://bucket/train", layout="imagefolder", blocks=blocks,
                        sample_block=np.arange(count, dtype=np.int32), sample_index=np.zeros(count, dtype=np.int32),
                        labels=np.arange(count, dtype=np.int64) % 1000, classes=[str(i) for i in range(1000)])
    text = manifest.to_json()

    def load():
        started = time.perf_counter()
        Manifest.from_json(text)
        return time.perf_counter() - started

    return {"blocks": count, "json_bytes": len(text), "load_s": median_of(load)}


def coordinator_costs() -> dict:
    config = load_config({"warm": {"url": None}})
    coordinator = Coordinator(config, node_alive=lambda: None).start()
    keys = [f"blk-{i:032x}" for i in range(200_000)]
    counts = {key: 1 for key in keys[:100_000]}

    def per_count():
        started = time.perf_counter()
        coordinator.sync("node-a", SyncReport(counts=counts, now=1.0, since=10**9))
        return (time.perf_counter() - started) / len(counts)

    def per_change():
        batch = keys[100_000:150_000]
        started = time.perf_counter()
        coordinator.sync("node-b", SyncReport(hot_added=batch, now=1.0, since=10**9))
        coordinator.sync("node-b", SyncReport(hot_removed=batch, now=1.0, since=10**9))
        return (time.perf_counter() - started) / (2 * len(batch))

    return {"seconds_per_reported_access": median_of(per_count), "seconds_per_residency_change": median_of(per_change)}


def coordinator_memory_per_block() -> dict:
    config = load_config({"warm": {"url": None}})
    gc.collect()
    tracemalloc.start()
    coordinator = Coordinator(config, node_alive=lambda: None).start()
    keys = [f"blk-{i:032x}" for i in range(200_000)]
    before = tracemalloc.get_traced_memory()[0]
    coordinator.sync("node-a", SyncReport(counts={k: 1 for k in keys}, hot_added=keys, now=1.0, since=10**9))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"bytes_per_tracked_and_held_block": (after - before) / len(keys)}


def channel_round_trip() -> dict:
    from typing import Protocol

    from tierload.wire.channel import ChannelClient, ChannelServer

    class PingAPI(Protocol):
        def ping(self, payload: bytes) -> int: ...

    class Target(PingAPI):
        def ping(self, payload):
            return len(payload)

    address = os.path.join(tempfile.gettempdir(), f"tierload-bench-{os.getpid()}.sock")
    server = ChannelServer(Target(), address, b"k" * 32, where="bench", interface=PingAPI)
    client = ChannelClient(address, b"k" * 32)
    try:
        def round_trip():
            calls = 2000
            started = time.perf_counter()
            for _ in range(calls):
                client.call(PingAPI.ping, b"x" * 64)
            return (time.perf_counter() - started) / calls

        return {"seconds_per_call": median_of(round_trip)}
    finally:
        client.close()
        server.close()


if __name__ == "__main__":
    print(json.dumps({"machine": f"{os.cpu_count()} cores", "manifest": manifest_per_million(),
                      "coordinator": coordinator_costs(), "coordinator_memory": coordinator_memory_per_block(),
                      "channel": channel_round_trip()}, indent=2))
