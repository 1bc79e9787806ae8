"""A tier backend on any fsspec URL that is not a local directory (e.g. ``memory://``, NFS via
an fsspec implementation, or an object store used as a shared warm tier)."""

from __future__ import annotations

import os
import secrets

import fsspec

from tierload.errors import BackendError
from tierload.stores.base import BlockStore
from tierload.stores.keys import check_key

_TMP = ".tmp"


class FsspecStore(BlockStore):
    """Blocks as files under an fsspec URL; writes go to a temporary name, then ``mv``.

    Args:
        url: fsspec URL of the directory, e.g. ``memory://warm``.
        tier: Tier name used in error messages.
        storage_options: Passed to :func:`fsspec.url_to_fs`.
    """

    def __init__(self, url: str, tier: str = "warm", storage_options: dict | None = None) -> None:
        self.url = url.rstrip("/")
        self.tier = tier
        self.storage_options = dict(storage_options or {})
        self._fs = None
        self._root = ""
        self._pid = -1

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fs"], state["_pid"] = None, -1
        return state

    @property
    def fs(self):
        if self._fs is None or self._pid != os.getpid():
            self._fs, self._root = fsspec.url_to_fs(self.url, **self.storage_options)
            self._root = self._root.rstrip("/")
            self._pid = os.getpid()
        return self._fs

    def _path(self, key: str) -> str:
        check_key(key)
        self.fs  # noqa: B018 - resolves _root
        return f"{self._root}/{key[-32:-30]}/{key}"

    def read(self, key: str) -> bytes:
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            raise KeyError(key) from None
        except OSError as exc:
            raise BackendError(f"cannot read from the {self.tier} tier: {exc}", tier=self.tier, key=key,
                               url=self.url) from exc

    def read_range(self, key: str, start: int, end: int) -> bytes:
        try:
            return self.fs.cat_file(self._path(key), start=start, end=end)
        except FileNotFoundError:
            raise KeyError(key) from None

    def write(self, key: str, data: bytes) -> None:
        final = self._path(key)
        tmp = f"{self._root}/{_TMP}/{key}.{os.getpid()}.{secrets.token_hex(4)}"
        try:
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, final)
        except OSError as exc:
            try:
                self.fs.rm_file(tmp)
            except OSError:
                pass
            raise BackendError(f"cannot write block to the {self.tier} tier: {exc}", tier=self.tier,
                               key=key, url=self.url) from exc

    def delete(self, key: str) -> bool:
        path = self._path(key)
        # Object stores delete idempotently without saying whether the key existed.
        if not self.fs.isfile(path):
            return False
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise BackendError(f"cannot delete a block from the {self.tier} tier: {exc}", tier=self.tier, key=key,
                               url=self.url) from exc
        self.fs.invalidate_cache(path)
        return True

    def contains(self, key: str) -> bool:
        return self.fs.isfile(self._path(key))

    def scan(self) -> dict[str, int]:
        found: dict[str, int] = {}
        try:
            entries = self.fs.find(self._root, detail=True)
        except FileNotFoundError:
            return found
        for path, info in entries.items():
            name = path.rsplit("/", 1)[-1]
            if f"/{_TMP}/" in path:
                continue  # temporary files of remote writers: their liveness is unknown here
            try:
                found[check_key(name)] = int(info.get("size") or 0)
            except ValueError:
                continue
        return found

    def __repr__(self) -> str:
        return f"FsspecStore({self.url!r})"
