"""The cold tier on fsspec's ``memory://`` store: objects that live inside this one process.

Listed with fsspec's ``find``; read from the stored file object itself, its version
(``created-size``) checked on the object that is read, as a local file's is on its descriptor.
Why its own backend: fsspec gives ``created`` as a float in listings and as a datetime in
``info``, so the generic HEAD-then-read check refused every read (issue 24).

Only a process that put the objects can read them: a node cache (a Ray actor, another process)
would see an empty store, so :attr:`MemoryBackend.process_local` makes a dataset refuse
``memory://`` at start with a :class:`~tierload.errors.ConfigError` saying so.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from tierload.errors import SourceChangedError, SourceNotFoundError
from tierload.stores.cold.async_reads import check_length
from tierload.stores.cold.backend import ThreadedBackend, count_read
from tierload.stores.cold.generic import list_empty_prefix
from tierload.stores.cold.object_info import ObjectInfo

if TYPE_CHECKING:
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource


def memory_version(info: dict) -> str:
    """``created-size`` of a memory object, ``created`` as POSIX seconds whichever way fsspec gave it."""
    created = info.get("created")
    stamp = created.timestamp() if isinstance(created, datetime) else float(created or 0)
    return f"{stamp!r}-{info.get('size')}"


class MemoryBackend(ThreadedBackend):
    """``memory://``: in this process only (see the module docstring)."""

    process_local = True

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        # loads pyarrow: imported by a process that lists, never by one that only reads
        from tierload.stores.cold.listing import list_fsspec

        return list_fsspec(source.fs, root, source.protocol, memory_version, exclude)

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        return list_empty_prefix(source, root, exclude)

    def head(self, source: ColdSource, url: str) -> ObjectInfo:
        info = source.fs.info(self.strip(source, url))
        return ObjectInfo(url, int(info.get("size") or 0), memory_version(info))

    def read_one(self, source: ColdSource, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
        stored: Any = source.fs.store.get(self.strip(source, url))
        if stored is None:
            raise SourceNotFoundError("no such object in this process's memory:// store", tier="cold", url=url)
        buffer = stored.getbuffer()
        if memory_version({"created": stored.created, "size": buffer.nbytes}) != version:
            raise SourceChangedError("the object changed since the manifest was built; refresh the manifest",
                                     tier="cold", url=url)
        data = bytes(buffer[offset:offset + length])
        check_length(url, offset, offset + length, data, buffer.nbytes)
        count_read(tally, data)
        return data
