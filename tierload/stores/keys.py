"""Block keys: safe, stable file names for blocks, whatever the object key holds.

A key is ``<slug>-<digest>``: the slug is a readable, sanitised fragment of the object's
base name (ASCII letters, digits, ``._-``, at most 40 characters, never starting with a dot);
the digest is xxh3-128 of (source URL, version, byte range), so a key cannot collide for
different bytes, cannot escape a tier directory (no ``/``, no ``..``), and a changed source
object (new ETag) gets a new key. The manifest maps keys back to their source.
"""

from __future__ import annotations

import re
import unicodedata

import xxhash

KEY_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,39}-[0-9a-f]{32}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SLUG_MAX = 40


def _slug(object_key: str) -> str:
    base = object_key.rstrip("/").rsplit("/", 1)[-1]
    ascii_base = unicodedata.normalize("NFKD", base).encode("ascii", "ignore").decode("ascii")
    slug = _UNSAFE.sub("_", ascii_base).lstrip("._-")[:_SLUG_MAX].rstrip(".")
    return slug or "block"


def block_key(url: str, version: str, offset: int = 0, length: int | None = None) -> str:
    """Derive the tier key of a block.

    Args:
        url: Source object URL, e.g. ``s3://bucket/train/7/img 1.png`` (any characters).
        version: The object's version: its ETag, or ``mtime+size`` where there is none.
        offset: First byte of the block in the object.
        length: Number of bytes in the block (``None``: to the end of the object).

    Returns:
        A key matching :data:`KEY_PATTERN` (at most 73 characters).
    """
    digest = xxhash.xxh3_128_hexdigest(f"{url}\x00{version}\x00{offset}\x00{length}".encode("utf-8"))
    return f"{_slug(url)}-{digest}"


def check_key(key: str) -> str:
    """Return ``key`` if it is a well-formed block key, else raise ``ValueError``.

    Tiers call this before touching a path so a malformed key never reaches the file system.
    """
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise ValueError(f"{key!r} is not a tierload block key (expected <slug>-<32 hex digits>)")
    return key
