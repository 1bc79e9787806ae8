"""Configuration: the frozen pydantic models, the one source of defaults.

The defaults live in one place: the models below. ``configs/default.yaml`` is their commented
copy for people to read and start from; a test checks it states exactly these values.

Precedence (explicit arguments > ``TIERLOAD_*`` environment > YAML file > defaults) is resolved
in one function, :func:`load_config` (:mod:`tierload.config.loading`); a file is checked for
every problem at once by :func:`check_config_file` (:mod:`tierload.config.check`).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tierload.policies.registry import POLICIES, POLICY_NAMES, policy_names
from tierload.units import parse_bytes


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _bytes_field(value: Any, info) -> int:
    return parse_bytes(value, field=info.field_name)


def absolute_local(value: str | None) -> str | None:
    """A relative local path made absolute against this process's working directory.

    Tier paths travel to other processes (Ray actors, DataLoader workers) whose working
    directory differs, so a relative one is resolved once, where the configuration is read, in
    the form it was given: ``hot`` becomes ``/job/dir/hot`` and ``file://warm`` becomes
    ``file:///job/dir/warm`` (so a directory named both ways by two jobs stays spelled as each
    would spell its absolute path). Absolute paths, ``~`` paths (the same home in every process
    of the user), other URLs (``s3://...``), None and ``""`` (refused with its key by
    :func:`tierload.config.tier_dirs.check_apart`) are returned as they are.
    """
    if not value or not value.strip():
        return value
    scheme, separator, rest = value.partition("://")
    if separator and scheme != "file":
        return value
    path = rest if separator else value
    if path.startswith(("/", "~")):
        return value
    absolute = os.path.abspath(path)
    return f"file://{absolute}" if separator else absolute


class ColdConfig(_Frozen):
    """How to reach the cold tier (S3 or any fsspec object store). Read-only.

    ``credential_provider`` is ``"package.module:function"``: a function returning
    ``{"key", "secret", "token"}``, called when the S3 client is built and again, once per
    process, when S3 answers ``ExpiredToken`` (the read is then retried once).
    """

    endpoint_url: str | None = None
    region: str | None = None
    anon: bool = False
    storage_options: dict[str, Any] = Field(default_factory=dict)
    max_request_bytes: int = 64 * 2**20
    connect_timeout_s: float = Field(default=5.0, gt=0)
    read_timeout_s: float = Field(default=60.0, gt=0)
    # Requests per read for an object that keeps failing while the endpoint answers others
    # (throttling, stalled or broken bodies); the one retry layer (tierload.stores.cold.retry).
    max_attempts: int = Field(default=3, ge=1, le=20)
    # Seconds a read keeps retrying while the endpoint fails as a whole (refused, timing out,
    # 5xx): an outage shorter than this costs time, not the epoch; past it, one clear error.
    outage_budget_s: float = Field(default=60.0, ge=0)
    # Requests to the cold tier in flight at once per process (async I/O, not one thread each).
    max_in_flight: int = Field(default=256, ge=1, le=4096)
    # Requests per second to one store (bucket or host) from one process, every job's and retry
    # included: the node cache sends all of a node's (tierload.stores.cold.request_rate). None: no limit.
    max_requests_per_s: float | None = Field(default=None, gt=0)
    # The engine of S3 range GETs: "obstore" (the Rust object_store client, requests outside the
    # GIL: tierload.stores.cold.obstore_reads) or "aiobotocore" (s3fs's client, which also takes
    # the options obstore does not carry); docs/cold-engines.md has the measurement.
    s3_engine: Literal["obstore", "aiobotocore"] = "obstore"
    credential_provider: str | None = None

    _parse_sizes = field_validator("max_request_bytes", mode="before")(_bytes_field)

    @field_validator("credential_provider")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None and (":" not in value or not all(value.split(":", 1))):
            raise ValueError(f"credential_provider={value!r}; give it as 'package.module:function'")
        return value

    @field_validator("max_request_bytes")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"max_request_bytes must be >= 1 byte, got {value}")
        return value


class WarmConfig(_Frozen):
    """The shared warm tier: any fsspec URL (``None`` disables it)."""

    url: str | None = "~/.cache/tierload/warm"
    capacity_bytes: int = 10 * 2**30
    compress: bool = False
    # A warm tier that refused a write (read-only, full, no permission) admits nothing for this
    # long; then one write is tried again, so a tier that is writable again is used again.
    write_retry_s: float = Field(default=30.0, gt=0)
    # A local warm directory shared on purpose (other users or a group may write it): skip the
    # check that refuses one another user owns or group/others may write (tierload.stores.dir_trust).
    shared: bool = False

    _parse_sizes = field_validator("capacity_bytes", mode="before")(_bytes_field)

    @field_validator("url")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        return absolute_local(value)


class HotConfig(_Frozen):
    """The node-local hot tier: a directory, plus an optional RAM level.

    ``dir`` may contain ``{node}``, replaced by the Ray node id (several simulated nodes on one
    machine need distinct directories), and ``{uid}``, replaced by the user id when the config
    is built (the default is per user: a fixed name under ``/tmp`` could be taken by anyone).
    ``peer_copy_min_count``: a block another node already
    holds is served from that peer and copied here only once its local decayed access count
    reaches this (so a cluster whose hot tiers together fit the data set holds each block once).
    """

    dir: str = Field(default="/tmp/tierload-{uid}/hot", validate_default=True)
    capacity_bytes: int = 2 * 2**30
    ram_capacity_bytes: int = 0
    peer_copy_min_count: float = Field(default=3.0, ge=0)
    peer_timeout_s: float = Field(default=10.0, gt=0)
    # A peer's answer is a Ray return value, so it passes whole through the object store: a block
    # larger than this share of the node's store is never asked of a peer (warm or cold serve it).
    peer_max_store_fraction: float = Field(default=0.25, gt=0, le=1)
    # A hot level that refused a write (read-only, no permission) admits nothing for this long;
    # a full one (ENOSPC) has its capacity lowered to what it holds and checked again as often.
    write_retry_s: float = Field(default=30.0, gt=0)
    # The hot directory is shared on purpose: skip the check that refuses one another user owns
    # or group/others may write (tierload.stores.dir_trust).
    shared: bool = False

    _parse_sizes = field_validator("capacity_bytes", "ram_capacity_bytes", mode="before")(_bytes_field)

    @field_validator("dir")
    @classmethod
    def _per_user(cls, value: str) -> str:
        return absolute_local(value.replace("{uid}", str(os.geteuid()))) or value


class PrefetchConfig(_Frozen):
    """How far ahead of the training loop the node cache fetches."""

    depth_blocks: int = Field(default=64, ge=0)
    depth_bytes: int = 256 * 2**20
    # Blocks being fetched at once per node (coroutines on one event loop, not threads).
    concurrency: int = Field(default=256, ge=1, le=4096)
    # A stream no consumer touched for this long is closed (its pins released); a consumer that
    # comes back reopens it. Long enough for a validation pass or a checkpoint between steps.
    stream_idle_timeout_s: float = Field(default=120.0, gt=0)

    _parse_sizes = field_validator("depth_bytes", mode="before")(_bytes_field)


class WireConfig(_Frozen):
    """Compression of block bytes that travel between processes."""

    zstd_level: int = Field(default=3, ge=-7, le=22)
    min_ratio: float = Field(default=1.1, ge=1.0)


class MetricsConfig(_Frozen):
    """Metrics in Prometheus format (:mod:`tierload.metrics`): the actors export their counters
    through Ray's metrics API every ``export_interval_s`` seconds, off the data path; the training
    process exports its data-stall figures at the end of each epoch. ``enabled: false`` exports nothing."""

    enabled: bool = True
    export_interval_s: float = Field(default=5.0, gt=0)


class TierPolicyConfig(_Frozen):
    """Admission and eviction of one tier.

    ``get_cost_bytes`` is read by ``lfu-size`` only: what one GET weighs, in bytes of transfer.
    """

    eviction: str
    admit_min_count: float = Field(default=1.0, ge=0)
    get_cost_bytes: int = 2**20

    _parse_sizes = field_validator("get_cost_bytes", mode="before")(_bytes_field)

    @field_validator("eviction")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:  # which tier may run it is checked by the section holding it
            raise ValueError(f"unknown policy {value!r}; choose one of {', '.join(POLICY_NAMES)}")
        return value


class DecayConfig(_Frozen):
    """Aging of access counts: an access weighs half as much ``half_life`` units later."""

    unit: Literal["epoch", "second"] = "epoch"
    half_life: float = Field(default=4.0, gt=0)


class PolicyConfig(_Frozen):
    """Migration policy for the hot and warm tiers."""

    hot: TierPolicyConfig = TierPolicyConfig(eviction="clairvoyant")
    warm: TierPolicyConfig = TierPolicyConfig(eviction="lfu")
    decay: DecayConfig = DecayConfig()

    @field_validator("warm")
    @classmethod
    def _warm_policy(cls, value: TierPolicyConfig) -> TierPolicyConfig:
        allowed = policy_names("warm")
        if value.eviction not in allowed:
            # Raised as a ValidationError located at warm.eviction (a ValueError here would point
            # at the whole warm section); pydantic prefixes the location with this field's.
            hot_only = [name for name in POLICY_NAMES if name not in allowed]
            message = (f"policy {value.eviction!r} cannot run the warm tier; choose one of "
                       f"{', '.join(allowed)} ({', '.join(hot_only)} needs a known access order, which only "
                       "a node's hot tier has)")
            raise ValidationError.from_exception_data("TierPolicyConfig", [
                {"type": PydanticCustomError("value_error", message), "loc": ("eviction",), "input": value.eviction}])
        return value


# The layouts a configuration may name. The registry (tierload.data.layouts.registry) implements
# exactly these; it is checked equal at import, so the configuration never depends on the data room.
LAYOUT_NAMES = ("imagefolder", "parquet", "files", "webdataset", "npy", "tokens", "jsonl", "lines", "arrow")


class ManifestConfig(_Frozen):
    """How the dataset is described from a listing of the cold prefix."""

    cache_dir: str = "~/.cache/tierload/manifests"
    layout: str = "auto"  # "auto" or one of LAYOUT_NAMES
    extensions: tuple[str, ...] = (".png", ".jpg", ".jpeg")
    label_column: str | None = "label"
    exclude: tuple[str, ...] = ("_SUCCESS", "_common_metadata", "_metadata")
    # Tar shards and .npy files larger than this are cached as byte-range blocks of about this size.
    block_bytes: int = 64 * 2**20
    # files/imagefolder: objects smaller than this are grouped (in pack_order) into packs
    # (one tier block each) of about pack_target_bytes; pack_target_bytes: 0 turns packing off.
    pack_threshold_bytes: int = 2**20
    pack_target_bytes: int = 8 * 2**20
    # "mixed": packs take small objects in a fixed pseudo-random order, so a pack holds samples of
    # many class folders; "listing": neighbours in listing order (a pack is then mostly one class).
    pack_order: Literal["mixed", "listing"] = "mixed"
    # tokens layout (docs/training.md, "Token windows"): windows of seq_len_tokens + 1 tokens, back to
    # back; token_dtype is the dtype of a raw .bin (a .npy or a Megatron .idx says its own);
    # token_cross_files: true lets a window run on into the next file in listing order; token_output:
    # "window" (one int64 tensor of seq_len_tokens + 1) or "pair" ((input, target), seq_len_tokens each).
    seq_len_tokens: int = Field(2048, ge=1)
    token_dtype: Literal["uint16", "uint32"] = "uint16"
    token_cross_files: bool = True
    token_output: Literal["window", "pair"] = "window"
    # jsonl: a line that is not JSON raises BadLineError naming file and line ("error"), or is
    # left out of the samples when the manifest is built and counted ("skip").
    on_bad_lines: Literal["error", "skip"] = "error"

    _parse_sizes = field_validator("block_bytes", "pack_threshold_bytes", "pack_target_bytes",
                                   mode="before")(_bytes_field)

    @field_validator("cache_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return absolute_local(value) or value

    @field_validator("layout")
    @classmethod
    def _known_layout(cls, value: str) -> str:
        if value != "auto" and value not in LAYOUT_NAMES:
            raise ValueError(f"unknown layout {value!r}; choose one of auto, {', '.join(LAYOUT_NAMES)}")
        return value

    @field_validator("block_bytes")
    @classmethod
    def _positive_block(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"block_bytes must be >= 1 byte, got {value}")
        return value

    @field_validator("pack_threshold_bytes", "pack_target_bytes")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"pack sizes must be >= 0 bytes, got {value}")
        return value


class RayConfig(_Frozen):
    """How tierload finds or starts Ray."""

    address: str | None = None
    namespace: str = "tierload"
    num_cpus: int | None = Field(default=None, ge=1)
    object_store_memory_bytes: int = 256 * 2**20

    _parse_sizes = field_validator("object_store_memory_bytes", mode="before")(_bytes_field)


class CostConfig(_Frozen):
    """Prices that turn a simulation into dollars per training run (``tierload policy simulate --sweep``).

    Defaults: AWS us-east-1 list prices as of 2024 (aws.amazon.com/s3/pricing, /ebs/pricing,
    /fsx/lustre/pricing). A GB is 2**30 bytes, as AWS bills it; a month is 730 hours.
    """

    s3_get_usd_per_1000: float = Field(0.0004, ge=0)  # S3 Standard GET requests, per 1,000
    s3_egress_usd_per_gb: float = Field(0.09, ge=0)  # S3 to the internet; 0.02 cross-region; 0 in-region
    hot_usd_per_gb_month: float = Field(0.08, ge=0)  # a node's hot tier (EBS gp3; instance NVMe is in the instance)
    warm_usd_per_gb_month: float = Field(0.145, ge=0)  # the shared warm tier (FSx for Lustre, SSD)
    run_hours: float = Field(24.0, gt=0)  # how long the storage is held for one training run


class TierloadConfig(_Frozen):
    """The whole configuration. Build it with :func:`load_config`."""

    cold: ColdConfig = ColdConfig()
    warm: WarmConfig = WarmConfig()
    hot: HotConfig = HotConfig()
    prefetch: PrefetchConfig = PrefetchConfig()
    wire: WireConfig = WireConfig()
    metrics: MetricsConfig = MetricsConfig()
    policy: PolicyConfig = PolicyConfig()
    manifest: ManifestConfig = ManifestConfig()
    ray: RayConfig = RayConfig()
    cost: CostConfig = CostConfig()

    @model_validator(mode="after")
    def _tiers_apart(self) -> "TierloadConfig":
        from tierload.config.tier_dirs import check_tiers_apart

        check_tiers_apart(self.hot.dir, self.warm.url)  # ConfigError is a ValueError: reported with the rest
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for YAML, JSON and shipping to actors)."""
        return self.model_dump(mode="json")


def default_config_dict() -> dict[str, Any]:
    """The defaults: the models' own, in plain-data form."""
    return TierloadConfig().to_dict()
