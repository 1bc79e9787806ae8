"""The cold tier on any fsspec store without a backend of its own: fsspec's ``find`` for the
listing, a HEAD then a ranged ``cat_file`` per read (on the source's thread pool)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierload.errors import BucketNotFoundError, SourceChangedError
from tierload.stores.cold.async_reads import check_length
from tierload.stores.cold.backend import ThreadedBackend, count_read
from tierload.stores.cold.errors import translate_error
from tierload.stores.cold.object_info import ObjectInfo

if TYPE_CHECKING:
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource


def version_of(info: dict) -> str:
    """The version an fsspec ``info`` dict records: its ETag, else ``mtime-size``."""
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return str(etag)
    return f"{info.get('mtime') or info.get('LastModified') or info.get('created', '')}-{info.get('size')}"


def list_empty_prefix(source: ColdSource, root: str, exclude: tuple[str, ...]) -> ObjectListing:
    """Nothing under an object store's prefix: it may name one object, or a bucket that does not exist.

    Raises:
        BucketNotFoundError: The bucket does not exist.
    """
    # loads pyarrow: imported by a process that lists, never by one that only reads
    from tierload.stores.cold.listing import ObjectListing

    bucket, _, key = root.partition("/")
    fs = source.fs
    if key and fs.isfile(root):
        info = fs.info(root)
        if root.rsplit("/", 1)[-1] not in exclude:
            return ObjectListing.of([ObjectInfo(source.backend.url_of(source, root), int(info.get("size") or 0),
                                                version_of(info))])
    if not fs.exists(bucket):
        raise BucketNotFoundError("the bucket does not exist; check the URL and the endpoint", tier="cold",
                                  url=source.url)
    return ObjectListing.of([])


class FsspecBackend(ThreadedBackend):
    """Any fsspec store: listed with ``find``, read with a HEAD (the version check) and a ranged read."""

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        # loads pyarrow: imported by a process that lists, never by one that only reads
        from tierload.stores.cold.listing import list_fsspec

        return list_fsspec(source.fs, root, source.protocol, version_of, exclude)

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        return list_empty_prefix(source, root, exclude)

    def read_one(self, source: ColdSource, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
        current = source.head(url)
        if current.version != version:
            raise SourceChangedError("the object changed since the manifest was built; refresh the manifest",
                                     tier="cold", url=url)
        try:
            data = source.fs.cat_file(source.strip(url), start=offset, end=offset + length)
        except Exception as exc:  # noqa: BLE001 - any SDK's error, translated in one place
            raise translate_error(exc, url) from exc
        count_read(tally, data)
        check_length(url, offset, offset + length, data, current.size)  # a file read stops at its end, silently
        return data
