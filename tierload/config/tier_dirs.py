"""The rule that tierload's tier locations never overlap each other or the data set's source.

Two tiers in one directory count the same bytes twice (each index claims the files as its
own), and a tier inside a ``file://`` source makes tier files, and the endpoint file that
holds the channel's key, turn up as training samples. So overlaps are refused when the
configuration is built (hot and warm) and when a data set names its source.

Locations are compared per scheme: local paths (plain or ``file://``) after ``~`` expansion
and ``realpath`` (symbolic links resolved), other URLs (``s3://bucket/prefix``) by their path.
A ``{node}`` placeholder in ``hot.dir`` is kept as a literal path component, which orders
it correctly below its parent.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from tierload.errors import ConfigError

# Schemes that name the same store.
_SAME_SCHEME = {"s3a": "s3", "local": "file", "gcs": "gs"}


def location(url: str) -> tuple[str, PurePosixPath]:
    """``(scheme, absolute path)`` of a tier or source URL, for comparing locations.

    Args:
        url: A local path, ``file://`` URL or any fsspec URL.

    Raises:
        ConfigError: ``url`` is empty.
    """
    if not url.strip():
        raise ConfigError("an empty path names no location (it would mean the current directory)")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme in ("file", "local"):
        path = url.removeprefix("file://").removeprefix("local://") if sep else url
        return "file", PurePosixPath(os.path.realpath(os.path.expanduser(path)))
    return _SAME_SCHEME.get(scheme, scheme), PurePosixPath("/" + rest.strip("/"))


def overlap(first: str, second: str) -> str | None:
    """How two locations overlap (``"are the same"``, ``"holds"``, ``"is inside"``), or None.

    Raises:
        ConfigError: Either is empty.
    """
    (scheme_a, path_a), (scheme_b, path_b) = location(first), location(second)
    if scheme_a != scheme_b:
        return None
    if path_a == path_b:
        return "are the same"
    if path_a in path_b.parents:
        return "holds"
    if path_b in path_a.parents:
        return "is inside"
    return None


def check_apart(named: dict[str, str | None], *, fix: str) -> None:
    """Refuse any two of ``named`` (config key -> URL; None: not used) that overlap.

    Args:
        named: The locations by the config key (or argument) that sets them.
        fix: What the user should do, appended to the message.

    Raises:
        ConfigError: Naming both keys, both locations and how they overlap.
    """
    items = [(key, url) for key, url in named.items() if url is not None]
    for key, url in items:
        if not url.strip():
            raise ConfigError(f"{key} is empty ({url!r}), which would mean the current directory; give a "
                              f"directory of its own" + (", or null to disable the tier" if key == "warm.url" else ""))
    for index, (key_a, url_a) in enumerate(items):
        for key_b, url_b in items[index + 1:]:
            how = overlap(url_a, url_b)
            if how is not None:
                verb = "and" if how == "are the same" else how
                tail = " are the same location" if how == "are the same" else ""
                raise ConfigError(f"{key_a} ({url_a!r}) {verb} {key_b} ({url_b!r}){tail}: {fix}")


def check_tiers_apart(hot_dir: str, warm_url: str | None) -> None:
    """Refuse a hot directory and warm tier that overlap, or an empty one.

    Raises:
        ConfigError: Naming both.
    """
    check_apart({"hot.dir": hot_dir, "warm.url": warm_url},
                fix="each tier needs a directory of its own (else both count the same files)")


def check_source_apart(source_url: str, tiers: dict[str, str | None]) -> None:
    """Refuse a data set source that holds, or lies inside, one of tierload's own locations.

    Args:
        source_url: The data set's URL.
        tiers: tierload's locations by config key (``hot.dir``, ``warm.url``, ``manifest.cache_dir``).

    Raises:
        ConfigError: Naming the source and the tier location.
    """
    for key, url in tiers.items():
        if url is not None:
            check_apart({"the data set's source": source_url, key: url},
                        fix=f"move {key} out of the source (else tierload's own files are listed as samples)")
