"""One object of the cold tier, as a listing or a HEAD request names it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectInfo:
    """One object in the cold tier.

    Attributes:
        url: Full URL, e.g. ``s3://bucket/train/7/img.png``.
        size: Size in bytes.
        version: ETag (S3) or ``mtime-size`` (stores without ETags).
    """

    url: str
    size: int
    version: str
