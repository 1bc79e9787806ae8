"""Resolving the effective configuration: the one function that decides precedence.

Precedence, highest first: explicit arguments > ``TIERLOAD_*`` environment > YAML file >
defaults. Environment variables name a nested key with double underscores
(``TIERLOAD_HOT__CAPACITY_BYTES=4GiB``) and are parsed to the field's type. The defaults are
the models' own (:mod:`tierload.config`, which re-exports everything here).
"""

from __future__ import annotations

import copy
import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from tierload.config import TierloadConfig, default_config_dict
from tierload.errors import ConfigError

ENV_PREFIX = "TIERLOAD_"


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
