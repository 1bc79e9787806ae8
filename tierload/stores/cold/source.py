"""The cold tier: the read-only source of truth (S3 through s3fs, or any fsspec store).

:class:`ColdSource` lists a prefix and reads versioned byte ranges under it, the same way for
every store; what differs between stores is a backend chosen by the URL's scheme
(:mod:`tierload.stores.cold.backend`: S3, local files, any other fsspec store). Its other parts,
one job each: where the dataset lives (:mod:`tierload.stores.cold.location`), SDK errors ->
:mod:`tierload.errors` types in one place (:mod:`tierload.stores.cold.errors`), listings and HEADs
retried (:mod:`tierload.stores.cold.retried_call`).
Retries: one layer, :mod:`tierload.stores.cold.retry` (``cold.max_attempts`` requests per read for
an object that keeps failing, ``cold.outage_budget_s`` seconds while the endpoint fails as a
whole), for range GETs (:mod:`tierload.stores.cold.async_reads`), listings and HEADs alike. botocore
is built with one attempt and s3fs with one try, so the counts are requests at the endpoint.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import fsspec

from tierload.config.models import ColdConfig
from tierload.errors import ConfigError
from tierload.stores.cold import aws_chain
from tierload.stores.cold.async_reads import RangeRequest
from tierload.stores.cold.backend import READ_THREADS, backend_for
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.request_rate import request_rate_for
from tierload.stores.cold.retried_call import call_with_retries

if TYPE_CHECKING:  # a listing is made by the backend, in a process that lists (it loads pyarrow)
    from tierload.stores.cold.listing import ObjectListing

log = logging.getLogger(__name__)


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
        self.backend = backend_for(self.protocol)
        self.storage_options = location.storage_options
        self._fs = None
        self._pid = -1
        self._credentials_generation = 0
        self._credentials_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1
        # ((pid, credentials generation), credentials): the provider asked once per generation in a
        # process, however many clients (s3fs's for listings, obstore's for GETs) take them
        self._provided: tuple[tuple[int, int], dict] | None = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_fs"], state["_pid"], state["_credentials_lock"] = None, -1, None  # rebuilt per process
        state["_pool"], state["_pool_pid"], state["_provided"] = None, -1, None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._credentials_lock = threading.Lock()

    @property
    def credential_provider(self) -> str | None:
        """The location's credential provider: the job's, not this process's configuration's."""
        return self.location.credential_provider

    def provided_credentials(self) -> dict:
        """Credentials from the job's ``cold.credential_provider`` (``key``, ``secret``, ``token``;
        empty when none), asked once per :attr:`credentials_generation` in each process."""
        path = self.credential_provider
        if not path:
            return {}
        when = (os.getpid(), self._credentials_generation)
        provided = self._provided
        if provided is not None and provided[0] == when:
            return provided[1]
        module_name, _, function_name = path.partition(":")
        try:
            provider = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cold.credential_provider={path!r} cannot be imported: {exc}") from exc
        credentials = provider()
        chosen = {name: credentials[name] for name in ("key", "secret", "token") if credentials.get(name)}
        self._provided = (when, chosen)
        return chosen

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
                log.warning("cold tier credentials expired; asking %s for new ones", self.credential_provider)
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
                options = {**self.storage_options, **self.provided_credentials()}
                if self.location.credential_chain or options.get("profile"):
                    options["session"] = aws_chain.session_for(self.location.credential_chain,
                                                               options.pop("profile", None))
                # skip_instance_cache: a cached instance may hold another process's session or loop.
                fs = cls(skip_instance_cache=True, **options)
                self.backend.configure(fs)
                self._pid = os.getpid()
                self._fs = fs
            return self._fs

    def strip(self, url: str) -> str:
        """``url`` as this store's backend spells its path (for fsspec stores: no scheme)."""
        return self.backend.strip(self, url)

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
        root = self.strip(self.url)

        def listing() -> ObjectListing:
            found = self.backend.list_prefix(self, root, exclude, spill_dir)
            return found if len(found) else self.backend.list_empty(self, root, exclude, found)

        return self._with_retries(self.url, listing)

    def head(self, url: str) -> ObjectInfo:
        """Current size and version of one object (one HEAD request, retried like a read)."""
        return self._with_retries(url, lambda: self.backend.head(self, url))

    def _with_retries(self, url: str, call: Callable[[], Any]) -> Any:
        """``call()`` (a listing or HEAD), retried as :mod:`tierload.stores.cold.retry` decides; errors translated."""
        return call_with_retries(url, call, self.config, self.location.endpoint_url,
                                 notes_health=self.backend.notes_endpoint_health, rate=request_rate_for(self))

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
        requests in flight per process); other stores read on a small thread pool (the backend's
        choice, :mod:`tierload.stores.cold.backend`).

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
        return self.backend.read_ranges(self, requests, tally)

    async def read_ranges_async(self, requests: Sequence[RangeRequest], tally: dict | None = None) -> list[bytes]:
        """:meth:`read_ranges` for a coroutine on any event loop: awaits instead of blocking.

        S3 reads run on s3fs's event loop (awaited directly when the caller runs on it); other
        stores read on this source's small thread pool.
        """
        tally = {} if tally is None else tally
        if not requests:
            return []
        return await self.backend.read_ranges_async(self, requests, tally)

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
        self.backend.prepare(self)

    @property
    def read_pool(self) -> ThreadPoolExecutor:
        """This process's small thread pool for stores whose reads block (files, synchronous SDKs)."""
        pool = self._pool
        if pool is None or self._pool_pid != os.getpid():
            with self._credentials_lock:
                if self._pool is None or self._pool_pid != os.getpid():
                    self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="tierload-cold")
                    self._pool_pid = os.getpid()
                pool = self._pool
        return pool
