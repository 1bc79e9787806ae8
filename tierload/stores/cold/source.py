"""The cold tier: the read-only source of truth (S3 through s3fs, or any fsspec store).

:class:`ColdSource` lists a prefix and reads versioned byte ranges under it. Its parts, one job
each: where the dataset lives (:mod:`tierload.stores.cold.location`, re-exported here), SDK
errors -> :mod:`tierload.errors` types in one place (:mod:`tierload.stores.cold.errors`),
``file://`` range reads (:mod:`tierload.stores.cold.local_file`), listings and HEADs retried
(:mod:`tierload.stores.cold.retried_call`), S3 range reads as coroutines
(:mod:`tierload.stores.cold.async_reads`).
Retries: one layer, :mod:`tierload.stores.cold.retry` (``cold.max_attempts`` requests per read for
an object that keeps failing, ``cold.outage_budget_s`` seconds while the endpoint fails as a
whole), for range GETs (:mod:`tierload.stores.cold.async_reads`), listings and HEADs alike. botocore
is built with one attempt and s3fs with one try, so the counts are requests at the endpoint.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import fsspec

from tierload.config.models import ColdConfig
from tierload.errors import BucketNotFoundError, ConfigError, SourceChangedError, SourceNotFoundError
from tierload.stores.cold import aws_chain
from tierload.stores.cold.async_reads import RangeRequest, S3RangeReader, check_length
from tierload.stores.cold.errors import translate_error
from tierload.stores.cold.listing import ObjectInfo, ObjectListing, list_fsspec, list_local, list_s3
from tierload.stores.cold.local_file import count_read, read_local_range
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.retried_call import call_with_retries

log = logging.getLogger(__name__)

# Reads of stores without an async client (file://, ...): a few at once is all a disk needs.
GENERIC_READ_THREADS = 8


class ColdSource:
    """Read-only access to the cold tier under one URL prefix.

    Args:
        location: The dataset's :class:`ColdLocation`, or its prefix URL (its options are then
            resolved from ``config`` here).
        config: Cold-tier settings.

    The filesystem is created lazily in each process (never inherited through fork or
    pickling), so every process gets its own event loop and HTTP session.
    """

    def __init__(self, location: ColdLocation | str, config: ColdConfig) -> None:
        if isinstance(location, str):
            location = ColdLocation.resolve(location, config)
        self.location = location
        self.url = location.url
        self.config = config
        self.protocol = location.protocol
        self.storage_options = location.storage_options
        self._fs = None
        self._pid = -1
        self._credentials_generation = 0
        self._credentials_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fs"], state["_pid"], state["_credentials_lock"] = None, -1, None  # rebuilt per process
        state["_pool"], state["_pool_pid"] = None, -1
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._credentials_lock = threading.Lock()

    def _provided_credentials(self) -> dict:
        path = self.config.credential_provider
        if not path:
            return {}
        module_name, _, function_name = path.partition(":")
        try:
            provider = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cold.credential_provider={path!r} cannot be imported: {exc}") from exc
        credentials = provider()
        return {name: credentials[name] for name in ("key", "secret", "token") if credentials.get(name)}

    @property
    def credentials_generation(self) -> int:
        """How many times this process rebuilt its client with fresh credentials."""
        return self._credentials_generation

    def refresh_credentials(self, generation: int) -> None:
        """Rebuild the client with fresh credentials, once per expiry however many readers saw it.

        Args:
            generation: :attr:`credentials_generation` when the failed request was sent; a
                reader that saw an expiry already handled by another does nothing.
        """
        with self._credentials_lock:
            if self._credentials_generation == generation:
                log.warning("cold tier credentials expired; asking %s for new ones", self.config.credential_provider)
                self._fs = None
                self._credentials_generation += 1

    @property
    def fs(self):
        current = self._fs
        if current is not None and self._pid == os.getpid():
            return current
        with self._credentials_lock:  # one client per process, however many threads ask at once
            if self._fs is None or self._pid != os.getpid():
                cls = fsspec.get_filesystem_class(self.protocol)
                options = {**self.storage_options, **self._provided_credentials()}
                if self.location.credential_chain or options.get("profile"):
                    options["session"] = aws_chain.session_for(self.location.credential_chain,
                                                               options.pop("profile", None))
                # skip_instance_cache: a cached instance may hold another process's session or loop.
                fs = cls(skip_instance_cache=True, **options)
                if self.protocol in ("s3", "s3a"):
                    fs.retries = 1  # one try: tierload.stores.cold.retry is the only retry layer
                self._pid = os.getpid()
                self._fs = fs
            return self._fs

    def _strip(self, url: str) -> str:
        return self.fs._strip_protocol(url)

    def _unstrip(self, path: str) -> str:
        return f"file://{path}" if self.protocol in ("file", "local") else f"{self.protocol}://{path}"

    def _version(self, info: dict) -> str:
        etag = info.get("ETag") or info.get("etag")
        if etag:
            return str(etag)
        return f"{info.get('mtime') or info.get('LastModified') or info.get('created', '')}-{info.get('size')}"

    def list_objects(self, exclude: tuple[str, ...] = (), spill_dir: str | None = None) -> ObjectListing:
        """List every object under the prefix, as columns (see :mod:`tierload.stores.cold.listing`).

        S3 is listed with ListObjectsV2 (its folders concurrently), ``file://`` with
        ``os.scandir``, other stores with fsspec's ``find``. Directory markers (keys ending in
        ``/``) and base names in ``exclude`` are skipped; the order is sorted by URL. A prefix
        that names one object lists as that object.

        Args:
            exclude: Base names to skip.
            spill_dir: Where an S3 listing's pages are written as they arrive (a temporary
                directory inside it, removed before returning; see
                :mod:`tierload.stores.cold.listing_spill`); None: the system's temporary directory.

        Raises:
            EndpointUnreachableError, BucketNotFoundError, BackendError.
            SourceNotFoundError: A ``file://`` directory that does not exist.
        """
        root = self._strip(self.url)

        def listing() -> ObjectListing:
            found = self._list(root, exclude, spill_dir)
            if len(found) == 0 and self.protocol not in ("file", "local"):
                found = self._list_empty(root, exclude)
            elif len(found) == 0 and not os.path.exists(root):
                # unlike an S3 prefix, a directory exists or not: a typo says so, not "empty"
                raise SourceNotFoundError(f"the directory {root!r} does not exist; check the path", tier="cold",
                                          url=self.url)
            return found

        return self._with_retries(self.url, listing)

    def _list(self, root: str, exclude: tuple[str, ...], spill_dir: str | None = None) -> ObjectListing:
        fs = self.fs
        if self.protocol in ("s3", "s3a") and not getattr(fs, "version_aware", False):
            from fsspec.asyn import sync

            return sync(fs.loop, list_s3, fs, self.protocol, root, exclude, spill_dir=spill_dir)
        if self.protocol in ("file", "local"):
            return list_local(root, "file", exclude)
        return list_fsspec(fs, root, self.protocol, self._version, exclude)

    def _list_empty(self, root: str, exclude: tuple[str, ...]) -> ObjectListing:
        """Nothing under the prefix: the prefix may name one object, or a bucket that does not exist."""
        bucket, _, key = root.partition("/")
        if key and self.fs.isfile(root):
            info = self.fs.info(root)
            if root.rsplit("/", 1)[-1] not in exclude:
                return ObjectListing.of([ObjectInfo(self._unstrip(root), int(info.get("size") or 0),
                                                    self._version(info))])
        if not self.fs.exists(bucket):
            raise BucketNotFoundError("the bucket does not exist; check the URL and the endpoint",
                                      tier="cold", url=self.url)
        return ObjectListing.of([])

    def head(self, url: str) -> ObjectInfo:
        """Current size and version of one object (one HEAD request, retried like a read)."""
        info = self._with_retries(url, lambda: self.fs.info(self._strip(url)))
        return ObjectInfo(url, int(info.get("size") or 0), self._version(info))

    def _with_retries(self, url: str, call: Callable[[], Any]) -> Any:
        """``call()`` (a listing or HEAD), retried as :mod:`tierload.stores.cold.retry` decides; errors translated."""
        return call_with_retries(url, call, self.config, self.location.endpoint_url,
                                 notes_health=self.protocol in ("s3", "s3a"))

    def read(self, url: str, version: str, offset: int = 0, length: int | None = None,
             tally: dict | None = None) -> bytes:
        """Read ``length`` bytes at ``offset`` of the object, only if it still has ``version``.

        Requests never exceed ``cold.max_request_bytes``. If ``tally`` is given, its
        ``cold_gets`` and ``cold_bytes`` entries are increased by what this read cost.

        Raises:
            SourceChangedError: The object's version differs from ``version``.
            SourceNotFoundError, EndpointUnreachableError, BackendError, TransientBackendError.
        """
        if length is None:
            length = self.head(url).size - offset
        return self.read_ranges([(url, version, offset, length)], tally)[0]

    def read_ranges(self, requests: Sequence[RangeRequest], tally: dict | None = None) -> list[bytes]:
        """Read many ranges at once, each checked like :meth:`read`; blocks until all are in.

        On S3 every range is a coroutine on s3fs's event loop (at most ``cold.max_in_flight``
        requests in flight per process); other stores read on a small thread pool.

        Args:
            requests: ``(url, version, offset, length)`` each (``length`` in bytes, not None).
            tally: If given, its ``cold_gets`` and ``cold_bytes`` are increased by what the
                reads cost.

        Returns:
            The bytes of each request, in request order.

        Raises:
            SourceChangedError: An object's version differs from the one requested.
            SourceNotFoundError, EndpointUnreachableError, BackendError, TransientBackendError:
                the first failure in request order (the other reads are then abandoned).
        """
        tally = {} if tally is None else tally
        if not requests:
            return []
        if self.protocol in ("s3", "s3a"):
            from fsspec.asyn import sync

            fs = self.fs
            return sync(fs.loop, self._s3_reader.read_ranges, requests, tally)
        if len(requests) == 1:
            return self._read_generic_all(requests, tally)
        # Each thread counts into its own tally (a shared dict's += would lose counts).
        tallies: list[dict] = [{} for _ in requests]
        futures = [self._generic_pool.submit(self._read_generic_all, [request], own)
                   for request, own in zip(requests, tallies, strict=True)]
        try:
            return [future.result()[0] for future in futures]
        finally:
            for future in futures:
                future.cancel()
            wait(futures)
            for own in tallies:
                for name, value in own.items():
                    tally[name] = tally.get(name, 0) + value

    async def read_ranges_async(self, requests: Sequence[RangeRequest], tally: dict | None = None) -> list[bytes]:
        """:meth:`read_ranges` for a coroutine on any event loop: awaits instead of blocking.

        S3 reads run on s3fs's event loop (awaited directly when the caller runs on it); other
        stores read on this source's small thread pool.
        """
        tally = {} if tally is None else tally
        if not requests:
            return []
        if self.protocol in ("s3", "s3a"):
            loop = self.fs.loop
            coroutine = self._s3_reader.read_ranges(requests, tally)
            if asyncio.get_running_loop() is loop:
                return await coroutine
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))
        # A pack's members in a few contiguous slices, one per pool thread: the disk's waits overlap
        # (os.pread releases the GIL), and a slice costs one hand-off to the pool, not a member.
        loop, pool = asyncio.get_running_loop(), self._generic_pool
        step = -(-len(requests) // GENERIC_READ_THREADS)
        slices = [requests[lo:lo + step] for lo in range(0, len(requests), step)]
        tallies: list[dict] = [{} for _ in slices]  # one per thread: a shared dict's += would lose counts
        try:
            parts = await asyncio.gather(*(loop.run_in_executor(pool, self._read_generic_all, part, own)
                                           for part, own in zip(slices, tallies, strict=True)))
        finally:
            for own in tallies:
                for name, value in own.items():
                    tally[name] = tally.get(name, 0) + value
        return [data for part in parts for data in part]

    async def read_async(self, url: str, version: str, offset: int, length: int,
                         tally: dict | None = None) -> bytes:
        """:meth:`read` of one range for a coroutine (``length`` given): see :meth:`read_ranges_async`."""
        return (await self.read_ranges_async([(url, version, offset, length)], tally))[0]

    def prepare(self) -> None:
        """Make this process's S3 client and the bucket's GET route now, sending no request, so
        that the first read does not wait for them.

        Making them is CPU work of the first read otherwise (botocore's service model and endpoint
        rules, the session, the signer): measured 1.0-4.5 s between the node cache's first fetch
        and its first GET at epoch 1 of ``tierload bench`` on a loaded 2-core machine, the link
        idle meanwhile. Other stores have nothing to prepare. A failure here (no credentials
        yet, say) is left to the first read, which meets it again and raises it typed.
        """
        if self.protocol not in ("s3", "s3a"):
            return
        from fsspec.asyn import sync

        try:
            fs = self.fs
            bucket = self._strip(self.url).split("/", 1)[0]
            sync(fs.loop, self._s3_reader.prepare, fs, bucket)
        except Exception as exc:  # noqa: BLE001 - the first read meets the same failure and raises it typed
            log.debug("cold tier %s: client not prepared ahead (%s: %s)", self.url, type(exc).__name__, exc)

    @property
    def _s3_reader(self) -> S3RangeReader:
        return S3RangeReader(self)

    @property
    def _generic_pool(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None or self._pool_pid != os.getpid():
            with self._credentials_lock:
                if self._pool is None or self._pool_pid != os.getpid():
                    self._pool = ThreadPoolExecutor(GENERIC_READ_THREADS, thread_name_prefix="tierload-cold")
                    self._pool_pid = os.getpid()
                pool = self._pool
        return pool

    def _read_generic_all(self, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        return [self._read_generic(url, version, offset, length, tally) for url, version, offset, length in requests]

    def _read_generic(self, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
        if self.protocol in ("file", "local"):
            return read_local_range(self._strip(url), url, version, offset, length, tally)
        current = self.head(url)
        if current.version != version:
            raise SourceChangedError("the object changed since the manifest was built; refresh the manifest",
                                     tier="cold", url=url)
        try:
            data = self.fs.cat_file(self._strip(url), start=offset, end=offset + length)
        except Exception as exc:  # noqa: BLE001
            raise translate_error(exc, url) from exc
        count_read(tally, data)
        check_length(url, offset, offset + length, data, current.size)  # a file read stops at its end, silently
        return data
