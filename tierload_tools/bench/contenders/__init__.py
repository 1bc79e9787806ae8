"""The contenders: one module each, run in its own subprocess by :mod:`tierload_tools.bench.run`.

A contender module defines ``run(ctx) -> dict`` (``setup_s``, ``epochs`` from
:func:`tierload_tools.bench.loop.run_epochs`, optional ``notes``) and, when the loader needs its
data converted first, ``convert(ctx) -> dict`` (``seconds`` plus whatever it reports), which the
harness runs once per invocation and times separately. ``python -m tierload_tools.bench.contenders
NAME PHASE CONTEXT_JSON RESULT_JSON`` runs one phase.

Imported from the peers' environment too: standard library and :mod:`tierload_tools.bench.workload`
only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from tierload_tools.bench.workload import Dataset, Workload


@dataclass(frozen=True)
class ContenderInfo:
    """How to run a contender.

    Attributes:
        name: Its name on the command line and in the report.
        module: The module that implements it.
        environment: ``"main"`` (tierload's environment) or ``"peers"`` (benchmarks/.venv-peers).
        label: What it is, for the report.
        converts: Whether it needs a conversion phase.
        requires: A module that must import in its environment, else it is reported as not run
            (for a peer in tierload's own environment whose package is an optional extra).
    """

    name: str
    module: str
    environment: str
    label: str
    converts: bool = False
    requires: str | None = None


CONTENDERS: dict[str, ContenderInfo] = {info.name: info for info in (
    ContenderInfo("s3fs", "tierload_tools.bench.contenders.s3fs_plain", "main",
                  "DataLoader, map-style dataset reading each sample with s3fs"),
    ContenderInfo("simplecache", "tierload_tools.bench.contenders.simplecache", "main",
                  "the same through fsspec simplecache:: (local disk, no capacity limit)"),
    ContenderInfo("streaming", "tierload_tools.bench.contenders.mosaic", "peers",
                  "MosaicML Streaming (MDS shards, cache_limit = hot capacity)", converts=True),
    ContenderInfo("litdata", "tierload_tools.bench.contenders.litdata_peer", "peers",
                  "LitData (optimize() chunks, max_cache_size = hot capacity)", converts=True),
    ContenderInfo("s3torch", "tierload_tools.bench.contenders.s3torch", "main",
                  "Amazon S3 Connector for PyTorch: S3MapDataset under a shuffling DataLoader, no cache",
                  requires="s3torchconnector"),
    ContenderInfo("raydata", "tierload_tools.bench.contenders.raydata", "main",
                  "Ray Data: read_binary_files(shuffle='files') -> map(decode) -> iter_torch_batches, streaming",
                  requires="ray.data"),
    ContenderInfo("tierload", "tierload_tools.bench.contenders.tierload_ds", "main",
                  "tierload TieredDataset, default policy, hot tier = hot capacity, warm disabled"),
    ContenderInfo("tierload-warm", "tierload_tools.bench.contenders.tierload_ds", "main",
                  "tierload TieredDataset, default policy, warm tier enabled (larger than the dataset)"),
    ContenderInfo("tierload-aiobotocore", "tierload_tools.bench.contenders.tierload_ds", "main",
                  "tierload TieredDataset as `tierload`, its S3 GETs through s3fs's aiobotocore client "
                  "(cold.s3_engine: aiobotocore) instead of obstore"),
    ContenderInfo("ram", "tierload_tools.bench.contenders.ram", "main",
                  "upper bound: all samples preloaded into RAM, decoded per access"),
)}


@dataclass(frozen=True)
class Context:
    """Everything a contender process needs, shipped as JSON.

    Attributes:
        name: The contender's name.
        workload: The workload.
        dataset: The raw dataset on the emulated S3.
        endpoint_url: The emulated S3 endpoint.
        credentials: ``{"key", "secret"}`` for the S3 server.
        workdir: Scratch directory of this run (caches, hot tiers), removed afterwards.
        convert_dir: Directory the conversion phase may leave state in, kept across repeats.
        repeat: Repeat index (0-based).
    """

    name: str
    workload: Workload
    dataset: Dataset
    endpoint_url: str
    credentials: dict
    workdir: str
    convert_dir: str
    repeat: int = 0

    @property
    def hot_bytes(self) -> int:
        """Local cache capacity in bytes: ``hot_fraction`` of the dataset."""
        return int(self.dataset.total_bytes * self.workload.hot_fraction)

    @property
    def s3fs_options(self) -> dict[str, Any]:
        """s3fs options reaching the emulated S3."""
        return {"key": self.credentials["key"], "secret": self.credentials["secret"],
                "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"}}

    @property
    def boto_options(self) -> dict[str, Any]:
        """boto3 client options reaching the emulated S3."""
        return {"endpoint_url": self.endpoint_url, "aws_access_key_id": self.credentials["key"],
                "aws_secret_access_key": self.credentials["secret"], "region_name": "us-east-1"}

    def aws_environment(self) -> dict[str, str]:
        """Environment variables that point AWS SDKs (boto3, Streaming) at the emulated S3."""
        return {"AWS_ACCESS_KEY_ID": self.credentials["key"], "AWS_SECRET_ACCESS_KEY": self.credentials["secret"],
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "S3_ENDPOINT_URL": self.endpoint_url,
                "AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ENDPOINT_URL_S3": self.endpoint_url,
                "AWS_ALLOW_HTTP": "true"}  # obstore (LitData's fast path) refuses http:// otherwise

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "workload": self.workload.to_dict(),
                           "dataset": self.dataset.to_dict(), "endpoint_url": self.endpoint_url,
                           "credentials": self.credentials, "workdir": self.workdir,
                           "convert_dir": self.convert_dir, "repeat": self.repeat})

    @classmethod
    def from_json(cls, text: str) -> "Context":
        data = json.loads(text)
        data["workload"] = Workload(**data["workload"])
        data["dataset"] = Dataset.from_dict(data["dataset"])
        return cls(**data)


def sampler_generator(seed: int, epoch: int):
    """A torch Generator for a map-style loader's shuffle of ``epoch`` (same for every contender)."""
    import torch

    return torch.Generator().manual_seed(seed * 1000 + epoch)


def in_worker_fs(holder: dict, factory):
    """A filesystem made lazily in each process (never inherited through fork)."""
    pid = os.getpid()
    if holder.get("pid") != pid:
        holder["fs"], holder["pid"] = factory(), pid
    return holder["fs"]
