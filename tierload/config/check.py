"""Checking a YAML config file for every problem at once, each with its line (``tierload policy validate``)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import ValidationError

from tierload.config.loading import deep_merge, validation_messages
from tierload.config.models import TierloadConfig, default_config_dict
from tierload.errors import ConfigError


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
