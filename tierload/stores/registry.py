"""One registry: URL scheme -> tier backend, imported lazily."""

from __future__ import annotations

from tierload.stores.base import BlockStore


def is_local_url(url: str) -> bool:
    """Whether ``url`` names a directory on this machine (plain path or ``file://``)."""
    return "://" not in url or url.startswith("file://")


def open_store(url: str, tier: str, storage_options: dict | None = None, *, shared: bool = False) -> BlockStore:
    """Return the backend for a tier URL.

    Args:
        url: A local path, ``file://`` URL, or any fsspec URL (``memory://``, ``s3://`` ...).
        tier: Tier name for error messages.
        storage_options: fsspec options for non-local URLs.
        shared: A local directory shared on purpose (no ownership or mode check).

    Raises:
        UntrustedDirError: A local directory another user owns or may write, not ``shared``.
    """
    if is_local_url(url):
        from tierload.stores.local import LocalDirStore
        return LocalDirStore(url.removeprefix("file://"), tier=tier, shared=shared)
    from tierload.stores.fsspec_store import FsspecStore
    return FsspecStore(url, tier=tier, storage_options=storage_options)
