"""Resolving the effective configuration: the one function that decides precedence.

Precedence, highest first: explicit arguments > ``TIERLOAD_*`` environment > YAML file >
defaults. Environment variables name a nested key with double underscores
(``TIERLOAD_HOT__CAPACITY_BYTES=4GiB``) and are parsed to the field's type. The defaults are
the models' own (:mod:`tierload.config.models`, which re-exports everything here).
"""

from __future__ import annotations

import copy
import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from tierload.config.models import TierloadConfig, default_config_dict
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


def env_sources(environ: Mapping[str, str], overrides: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Which ``TIERLOAD_*`` variable set each dotted key: ``{"hot.capacity_bytes": "TIERLOAD_HOT__CAPACITY_BYTES"}``.

    Keys that ``overrides`` (explicit arguments) set too are left out: their value is not the variable's.
    """
    explicit = set(_dotted_keys(overrides or {}))
    return {key: name for name in environ if name.startswith(ENV_PREFIX) and "__" in name
            if (key := ".".join(name[len(ENV_PREFIX):].lower().split("__"))) not in explicit}


def _dotted_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        keys.append(f"{prefix}{key}")
        if isinstance(value, Mapping):
            keys.extend(_dotted_keys(value, f"{prefix}{key}."))
    return keys


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (override wins)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def validation_messages(exc: ValidationError, sources: Mapping[str, str] | None = None) -> list[str]:
    """One line per problem: ``hot.capacity_bytes: 'ten gigs' is not a size ...``.

    Args:
        exc: pydantic's error.
        sources: Dotted key -> the environment variable that set it (:func:`env_sources`); a
            problem in such a key (or below it) names the variable.
    """
    sources = sources or {}
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
        line = f"{where}: {message}" if where and not message.startswith(where) else message
        variable = next((sources[key] for key in _prefixes(err["loc"]) if key in sources), None)
        lines.append(f"{line} (set by the environment variable {variable})" if variable else line)
    return lines


def _prefixes(loc: tuple) -> list[str]:
    """``("hot", "capacity_bytes")`` -> ``["hot.capacity_bytes", "hot"]``: the longest first."""
    parts = [str(part) for part in loc]
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def build_config(data: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> TierloadConfig:
    """Validate a full config mapping.

    Args:
        data: The full mapping.
        sources: Dotted key -> environment variable that set it, named in the messages.

    Raises:
        ConfigError: Listing every invalid value with its key.
    """
    try:
        return TierloadConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError("invalid tierload config:\n  " + "\n  ".join(validation_messages(exc, sources))) from None


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
    environ = os.environ if environ is None else environ
    data = deep_merge(data, env_overrides(environ))
    data = deep_merge(data, overrides or {})
    return build_config(data, env_sources(environ, overrides))
