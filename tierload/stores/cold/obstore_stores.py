"""obstore clients (Rust ``object_store``) for the cold tier: which store a URL names, built once per process.

The one place that imports obstore's store classes. A URL maps to a store and a path inside it:

    s3://bucket/key             S3Store(bucket)          key
    az://container/key          AzureStore(container)    key      (also abfs://, azure://)
    gs://bucket/key             GCSStore(bucket)         key      (also gcs://)
    http(s)://host:port/a/b     HTTPStore(origin)        a/b

Options come from the dataset's resolved ``storage_options``: for S3 the s3fs options tierload
already resolved (:mod:`tierload.stores.cold.s3_obstore_config`), for the others
obstore's own configuration keys (e.g. Azure's ``account_name``, ``access_key``, ``endpoint``;
adlfs's ``account_key`` is accepted as ``access_key``). obstore's own retries are off: tierload's
retry layer (:mod:`tierload.stores.cold.retry`) is the only one. A client holds a connection
pool and is made lazily in each process (never inherited through fork or pickling).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tierload.errors import ConfigError, MissingDependencyError
from tierload.stores.cold.open_files import process_in_flight
from tierload.stores.cold.s3_obstore_config import obstore_s3_config

if TYPE_CHECKING:
    from tierload.stores.cold.source import ColdSource

AZURE_SCHEMES = ("az", "abfs", "abfss", "azure")
GCS_SCHEMES = ("gs", "gcs")
HTTP_SCHEMES = ("http", "https")
S3_SCHEMES = ("s3", "s3a")

# Which extra brings obstore for a scheme (the message of a missing install names it).
_EXTRA_OF = {**dict.fromkeys(AZURE_SCHEMES, "azure"), **dict.fromkeys(GCS_SCHEMES, "gcs"),
             **dict.fromkeys(HTTP_SCHEMES, "http"), **dict.fromkeys(S3_SCHEMES, "obstore")}
_ADLFS_NAMES = {"account_key": "access_key", "sas_token": "sas_key"}

_stores: dict[tuple, Any] = {}
_lock = threading.Lock()
# The process that made obstore clients. obstore's Rust runtime (tokio) runs their requests on
# threads a forked child does not inherit, so a child's request waits forever (tokio-rs/tokio#4301:
# fork is not supported once a runtime has started). A fork inherits this pid, not the threads.
_clients_pid: int | None = None


def _drop_clients_before_exit() -> None:
    """Drop this process's obstore clients (and whatever cycles still hold one) while the
    interpreter runs. Dropped during finalization instead, one exit in ten aborted (SIGABRT, no
    message) after reads through fsspec's loop thread: 6 of 60 child processes here, 0 of 60 with
    this handler (``benchmarks/results/2026-12-02-obstore-default/exit-abort.md``)."""
    _stores.clear()
    gc.collect()


def made_clients_here() -> bool:
    """Whether this process has made an obstore client (so a child forked now could not use obstore)."""
    return _clients_pid == os.getpid()


def forked_after_clients() -> bool:
    """Whether this process was forked from one that had made obstore clients: obstore cannot run here."""
    return _clients_pid is not None and _clients_pid != os.getpid()


def split_url(url: str) -> tuple[str, str, str]:
    """``(scheme, root, path)`` of ``url``: the store's root (a bucket, a container or an origin
    ``http://host:port``) and the object's path inside it (no leading ``/``)."""
    scheme, _, rest = url.partition("://")
    if scheme in HTTP_SCHEMES:
        parts = urlsplit(url)
        return scheme, f"{scheme}://{parts.netloc}", parts.path.lstrip("/")
    root, _, path = rest.partition("/")
    return scheme, root, path


def import_obstore(scheme: str) -> Any:
    """The ``obstore`` module.

    Raises:
        MissingDependencyError: obstore is not installed; names the extra that brings it.
    """
    try:
        import arro3.core  # noqa: F401 - obstore hands listings over as Arrow batches through it
        import obstore
    except ImportError as exc:
        extra = _EXTRA_OF.get(scheme, "obstore")
        raise MissingDependencyError(f"the cold tier on {scheme}:// reads through obstore, which is not installed: "
                                     f"pip install 'tierload[{extra}]'", package=exc.name or "obstore",
                                     extra=extra) from exc
    return obstore


def store_for(source: ColdSource, url: str) -> tuple[Any, str]:
    """This process's obstore client for ``url``'s bucket (container, origin) and the object's path in it.

    Raises:
        MissingDependencyError: obstore is not installed.
        ConfigError: A scheme obstore does not read, or an option it does not take.
    """
    scheme, root, path = split_url(url)
    return client_for(source, scheme, root), path


def client_for(source: ColdSource, scheme: str, root: str) -> Any:
    """This process's obstore client for the bucket, container or origin ``root`` of ``scheme``
    (see :func:`store_for`), made on first use with ``source``'s options.

    Raises:
        ConfigError: This process was forked from one that had made obstore clients
            (:func:`forked_after_clients`); S3 reads through aiobotocore there instead, the
            other stores have no second client.
    """
    global _clients_pid
    if forked_after_clients():
        raise ConfigError(f"{source.url} is read through obstore, whose runtime this process lost when it was "
                          f"forked from process {_clients_pid}, which had used it; start DataLoader workers with "
                          "multiprocessing_context='spawn' or 'forkserver', or do not read the cold tier in the parent "
                          "before it forks them",
                          tier="cold", url=source.url)
    options = source.storage_options
    # Whatever chooses the credentials is part of the key: two jobs on one node cache never share a client.
    key = (os.getpid(), scheme, root, source.credential_provider, source.location.credential_chain,
           source.credentials_generation, json.dumps(options, sort_keys=True, default=str))
    store = _stores.get(key)
    if store is None:
        with _lock:
            store = _stores.get(key)
            if store is None:
                store = _stores[key] = _make_store(source, scheme, root, options)
                if _clients_pid != os.getpid():
                    atexit.register(_drop_clients_before_exit)
                _clients_pid = os.getpid()
    return store


def _client_options(config: Any, endpoint: str) -> Any:  # obstore's ClientConfig (a TypedDict)
    return {"connect_timeout": timedelta(seconds=config.connect_timeout_s),
            "timeout": timedelta(seconds=config.read_timeout_s),
            "pool_max_idle_per_host": str(process_in_flight(config.max_in_flight)),
            "allow_http": endpoint.startswith("http://")}


# One try per request: tierload.stores.cold.retry is the one retry layer.
_NO_RETRIES: Any = {"max_retries": 0, "retry_timeout": timedelta(seconds=1)}


def _make_store(source: ColdSource, scheme: str, root: str, options: dict[str, Any]) -> Any:
    import_obstore(scheme)
    from obstore.exceptions import BaseError
    from obstore.store import AzureStore, GCSStore, HTTPStore, S3Store

    config = source.config
    try:
        if scheme in S3_SCHEMES:
            s3_config, endpoint, provider = obstore_s3_config(source, options)
            return S3Store(root, config=s3_config, client_options=_client_options(config, endpoint),
                           retry_config=_NO_RETRIES, credential_provider=provider)
        if scheme in HTTP_SCHEMES:
            return HTTPStore.from_url(root, client_options=_client_options(config, root), retry_config=_NO_RETRIES)
        own: Any = {_ADLFS_NAMES.get(name, name): value for name, value in options.items()}
        endpoint = str(own.get("endpoint") or own.get("base_url") or "")
        if scheme in AZURE_SCHEMES:
            return AzureStore(root, config=own, client_options=_client_options(config, endpoint),
                              retry_config=_NO_RETRIES)
        if scheme in GCS_SCHEMES:
            return GCSStore(root, config=own, client_options=_client_options(config, endpoint),
                            retry_config=_NO_RETRIES)
    except BaseError as exc:
        raise ConfigError(f"cold.storage_options for {scheme}:// are not taken by obstore: {exc}; see "
                          "obstore's store configuration for the keys", tier="cold", url=source.url) from exc
    raise ConfigError(f"obstore does not read {scheme}:// URLs; use s3, az, gs or http(s)", tier="cold",
                      url=source.url)

