"""Configuration: frozen pydantic models, and the one function that resolves precedence.

Precedence, highest first: explicit arguments > ``TIERLOAD_*`` environment > YAML file >
defaults. Environment variables name a nested key with double underscores
(``TIERLOAD_HOT__CAPACITY_BYTES=4GiB``) and are parsed to the field's type.

The defaults live in one place: the models below. ``configs/default.yaml`` is their commented
copy for people to read and start from; a test checks it states exactly these values.
"""

from __future__ import annotations

import copy
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tierload.errors import ConfigError
from tierload.layouts.registry import LAYOUT_NAMES
from tierload.policies.registry import POLICIES, POLICY_NAMES, policy_names
from tierload.units import parse_bytes

ENV_PREFIX = "TIERLOAD_"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _bytes_field(value: Any, info) -> int:
    return parse_bytes(value, field=info.field_name)


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
    # (throttling, stalled or broken bodies); the one retry layer (tierload.stores.retry).
    max_attempts: int = Field(default=3, ge=1, le=20)
    # Seconds a read keeps retrying while the endpoint fails as a whole (refused, timing out,
    # 5xx): an outage shorter than this costs time, not the epoch; past it, one clear error.
    outage_budget_s: float = Field(default=60.0, ge=0)
    # Requests to the cold tier in flight at once per process (async I/O, not one thread each).
    max_in_flight: int = Field(default=256, ge=1, le=4096)
    # S3 range GETs signed with botocore's signer and sent on one shared aiohttp pool (a small
    # fraction of aiobotocore's CPU per request); False: every GET through aiobotocore.
    lean_gets: bool = True
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
        return value.replace("{uid}", str(os.geteuid()))


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


class ManifestConfig(_Frozen):
    """How the dataset is described from a listing of the cold prefix."""

    cache_dir: str = "~/.cache/tierload/manifests"
    layout: str = "auto"  # "auto" or a name in tierload.layouts.registry
    extensions: tuple[str, ...] = (".png", ".jpg", ".jpeg")
    label_column: str | None = "label"
    exclude: tuple[str, ...] = ("_SUCCESS", "_common_metadata", "_metadata")
    # Tar shards and .npy files larger than this are cached as byte-range blocks of about this size.
    block_bytes: int = 64 * 2**20
    # files/imagefolder: objects smaller than this are grouped, in listing order, into packs
    # (one tier block each) of about pack_target_bytes; pack_target_bytes: 0 turns packing off.
    pack_threshold_bytes: int = 2**20
    pack_target_bytes: int = 8 * 2**20
    # "mixed": packs take small objects in a fixed pseudo-random order, so a pack holds samples of
    # many class folders; "listing": neighbours in listing order (a pack is then mostly one class).
    pack_order: Literal["mixed", "listing"] = "mixed"

    _parse_sizes = field_validator("block_bytes", "pack_threshold_bytes", "pack_target_bytes",
                                   mode="before")(_bytes_field)

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
        from tierload.tier_dirs import check_tiers_apart

        check_tiers_apart(self.hot.dir, self.warm.url)  # ConfigError is a ValueError: reported with the rest
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for YAML, JSON and shipping to actors)."""
        return self.model_dump(mode="json")


def default_config_dict() -> dict[str, Any]:
    """The defaults: the models' own, in plain-data form."""
    return TierloadConfig().to_dict()


def packaged_default_yaml() -> str:
    """The text of the packaged ``configs/default.yaml`` (the defaults, commented)."""
    return resources.files("tierload.configs").joinpath("default.yaml").read_text(encoding="utf-8")


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """Read a policy/config YAML file into a dict.

    Raises:
        ConfigError: The file is missing, is not YAML, or is not a mapping at the top.
    """
    file = Path(path).expanduser()
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {str(file)!r} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(file)!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping at the top, got {type(data).__name__}")
    return data


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """``TIERLOAD_HOT__CAPACITY_BYTES=4GiB`` -> ``{"hot": {"capacity_bytes": "4GiB"}}``.

    Values stay strings (YAML-parsed, so ``true``/``3``/``null`` work); pydantic converts them
    to each field's type, so a seed or size from the environment is never left a string.
    """
    result: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = name[len(ENV_PREFIX):].lower().split("__")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (int, float)) and not isinstance(value, bool) and path[-1].endswith("_bytes"):
            value = int(value)
        node = result
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = raw if isinstance(value, (dict, list)) and path[-1] != "extensions" else value
    return result


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (override wins)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def validation_messages(exc: ValidationError) -> list[str]:
    """One line per problem: ``hot.capacity_bytes: 'ten gigs' is not a size ...``."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"])
        message = err["msg"]
        for prefix in ("Value error, ", "Assertion failed, ", f"{err['loc'][-1] if err['loc'] else ''}: "):
            message = message.removeprefix(prefix)
        if err["type"] == "extra_forbidden":
            message = f"unknown key {err['loc'][-1]!r} (typo?)"
        elif "input" in err and err["type"] not in ("value_error",) and not message.startswith(where):
            message = f"{message} (got {err['input']!r})"
        lines.append(f"{where}: {message}" if where and not message.startswith(where) else message)
    return lines


def build_config(data: Mapping[str, Any]) -> TierloadConfig:
    """Validate a full config mapping.

    Raises:
        ConfigError: Listing every invalid value with its key.
    """
    try:
        return TierloadConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError("invalid tierload config:\n  " + "\n  ".join(validation_messages(exc))) from None


def _key_lines(text: str) -> tuple[dict[tuple[str, ...], int], list[tuple[int, str]]]:
    """Line (1-based) of every key path in a YAML document, and its duplicate keys as problems."""
    lines: dict[tuple[str, ...], int] = {}
    problems: list[tuple[int, str]] = []

    def walk(node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                sub = (*path, str(key_node.value))
                line = key_node.start_mark.line + 1
                if sub in lines:
                    problems.append((line, f"{'.'.join(sub)}: duplicate key (first set on line {lines[sub]}); "
                                           "remove one"))
                    continue
                lines[sub] = line
                walk(value_node, sub)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines.setdefault((*path, str(index)), item.start_mark.line + 1)
                walk(item, (*path, str(index)))

    walk(yaml.compose(text, Loader=yaml.SafeLoader), ())
    return lines, problems


def check_config_file(path: str | os.PathLike) -> tuple[TierloadConfig | None, list[str]]:
    """Validate a YAML config file merged over the defaults, finding every problem.

    Unlike :func:`load_config`, this reads no environment and does not stop at the first
    problem: YAML syntax, duplicate keys, unknown keys and invalid values are all reported.

    Args:
        path: The YAML file.

    Returns:
        ``(config, [])`` when the file is valid, else ``(None, problems)``: one line per
        problem, ``"line N: key.path: what is wrong and what would be right"`` (no line
        prefix for a problem not tied to a line of the file).

    Raises:
        ConfigError: The file does not exist or cannot be read.
    """
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {str(file)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {str(file)!r}: {exc}") from None
    try:
        lines, problems = _key_lines(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return None, [f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}"]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, [f"line 1: the file must hold a mapping of sections (cold, warm, hot, policy ...), "
                      f"got {type(data).__name__}"]
    try:
        config = TierloadConfig.model_validate(deep_merge(default_config_dict(), data))
    except ValidationError as exc:
        for error, message in zip(exc.errors(), validation_messages(exc), strict=False):
            loc = tuple(str(part) for part in error["loc"])
            found = next((loc[:n] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
            problems.append((lines[found], message) if found else (0, message))
        config = None
    if problems:
        return None, [f"line {line}: {message}" if line else message for line, message in sorted(problems)]
    return config, []


def as_config(config: "TierloadConfig | Mapping[str, Any]") -> TierloadConfig:
    """An already-resolved config, or its dict form (as shipped to actors: no defaults or
    environment are applied again, so the sender's precedence decision stands)."""
    return config if isinstance(config, TierloadConfig) else build_config(config)


def load_config(source: "TierloadConfig | Mapping[str, Any] | str | os.PathLike | None" = None,
                overrides: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> TierloadConfig:
    """Resolve the effective configuration.

    Args:
        source: A ready :class:`TierloadConfig` (returned with only ``overrides`` applied), a
            mapping of settings, a path to a YAML file, or ``None`` for the defaults.
        overrides: Explicit settings (nested mapping); they win over everything else.
        environ: Environment to read ``TIERLOAD_*`` variables from (default ``os.environ``).

    Returns:
        The validated, frozen configuration.

    Raises:
        ConfigError: A value is invalid (the message lists every bad key and value), or the
            file cannot be read.
    """
    if isinstance(source, TierloadConfig):
        return build_config(deep_merge(source.to_dict(), overrides or {})) if overrides else source
    data = default_config_dict()
    if isinstance(source, (str, os.PathLike)):
        data = deep_merge(data, read_yaml(source))
    elif isinstance(source, Mapping):
        data = deep_merge(data, source)
    elif source is not None:
        raise ConfigError(f"config must be a TierloadConfig, a mapping or a YAML path, got {type(source).__name__}")
    data = deep_merge(data, env_overrides(os.environ if environ is None else environ))
    data = deep_merge(data, overrides or {})
    return build_config(data)
