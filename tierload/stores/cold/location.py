"""Where a dataset lives in the cold tier and how to reach it, resolved once.

:func:`canonical_url` gives one spelling per prefix, :func:`s3_storage_options` resolves the
s3fs options from the config and the environment, and :class:`ColdLocation` holds both (with
the AWS credential chain's settings) so that every process that reads the cold tier reads it
exactly as the process that read the configuration would.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from dataclasses import dataclass, field
from typing import Any

import fsspec

from tierload.config.models import ColdConfig
from tierload.errors import ConfigError
from tierload.stores.cold import aws_chain
from tierload.stores.cold.open_files import process_in_flight

_DUPLICATE_SLASHES = re.compile(r"/{2,}")


def canonical_url(url: str) -> str:
    """One spelling per prefix or object, so one object is one manifest and one cache entry.

    ``s3a://`` (Hadoop's name for the same S3 objects) becomes ``s3://``; in the path of an
    ``s3``, ``file`` or scheme-less URL, runs of ``/`` become one and a trailing ``/`` goes:
    ``s3://b/p``, ``s3://b/p/``, ``s3://b//p`` and ``s3a://b/p`` are all ``s3://b/p``. S3 itself
    would treat ``b//p`` as the key prefix ``/p``; a doubled slash in a prefix is a joining
    mistake far more often than a key that starts with ``/``, so it is read as the user meant.
    Keys found by the listing are never rewritten. Other URLs (``http``, ``gs`` ...) only lose
    a trailing ``/``.

    Args:
        url: A prefix or object URL as the user gave it.

    Returns:
        The canonical URL.
    """
    scheme, separator, path = url.partition("://")
    if not separator:
        scheme, path = "", url
    if scheme not in ("", "s3", "s3a", "file", "local"):
        return url.rstrip("/")
    if scheme == "s3a":
        scheme = "s3"
    path = _DUPLICATE_SLASHES.sub("/", path)
    path = path.rstrip("/") if path.strip("/") else path[:1]
    if scheme == "s3":
        path = path.lstrip("/")
    return f"{scheme}://{path}" if scheme else path


def s3_storage_options(config: ColdConfig, environ: dict | None = None) -> dict[str, Any]:
    """Resolve the s3fs options once, in the process that reads the config.

    Endpoint precedence: ``cold.endpoint_url`` > ``storage_options.client_kwargs.endpoint_url``
    > ``AWS_ENDPOINT_URL_S3`` > ``AWS_ENDPOINT_URL``. Region: ``cold.region`` >
    ``client_kwargs.region_name`` > ``AWS_REGION`` > ``AWS_DEFAULT_REGION``. The resolved values
    are shipped to every process (DataLoader workers, actors on other nodes), so no process
    falls back to AWS because its environment differs.

    Raises:
        ConfigError: A key s3fs does not take, or an endpoint without ``http://``/``https://``.
    """
    env = os.environ if environ is None else environ
    check_s3_option_names(config.storage_options)
    options = dict(config.storage_options)
    client_kwargs = dict(options.pop("client_kwargs", {}) or {})
    endpoint = _checked_endpoint(
        ("cold.endpoint_url", config.endpoint_url),
        ("cold.storage_options.client_kwargs.endpoint_url", client_kwargs.get("endpoint_url")),
        ("AWS_ENDPOINT_URL_S3", env.get("AWS_ENDPOINT_URL_S3")), ("AWS_ENDPOINT_URL", env.get("AWS_ENDPOINT_URL")))
    region = (config.region or client_kwargs.get("region_name") or env.get("AWS_REGION")
              or env.get("AWS_DEFAULT_REGION"))
    if endpoint:
        client_kwargs["endpoint_url"] = endpoint
    if region:
        client_kwargs["region_name"] = region
    config_kwargs = dict(options.pop("config_kwargs", {}) or {})
    config_kwargs.setdefault("connect_timeout", config.connect_timeout_s)
    config_kwargs.setdefault("read_timeout", config.read_timeout_s)
    # One retry layer (tierload.stores.cold.retry): botocore's own would multiply the requests.
    config_kwargs["retries"] = {"total_max_attempts": 1, "mode": "standard"}
    # botocore's pool (10 connections by default) would otherwise queue the requests in flight.
    config_kwargs.setdefault("max_pool_connections", process_in_flight(config.max_in_flight))
    options.update(client_kwargs=client_kwargs, config_kwargs=config_kwargs)
    if config.anon:
        options["anon"] = True
    return options


# Keys s3fs takes besides its own parameters: fsspec's listing cache and instance cache, and the
# profile tierload turns into a botocore session (tierload.stores.cold.source); the rest goes to aiobotocore's
# AioSession, whose own parameters are read from its signature.
_S3_EXTRA_OPTIONS = ("use_listings_cache", "listings_expiry_time", "max_paths", "skip_instance_cache", "profile")


def s3_option_names() -> frozenset[str]:
    """The ``storage_options`` keys s3fs accepts (anything else fails its first request)."""
    import s3fs
    from aiobotocore.session import AioSession

    names = {name for cls in (s3fs.S3FileSystem, AioSession)
             for name, parameter in inspect.signature(cls.__init__).parameters.items()
             if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)}
    return frozenset(names | set(_S3_EXTRA_OPTIONS))


# Keys every s3fs takes (a test keeps this a subset of s3_option_names()): options made only of
# these are checked without importing s3fs and aiobotocore (~14 MB in a training process that
# reads through its node cache and never opens an S3 client itself).
COMMON_S3_OPTIONS = frozenset({"anon", "key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs",
                               "requester_pays", "default_block_size", "default_fill_cache", "version_aware",
                               "use_ssl", "session", "s3_additional_kwargs", "profile", "use_listings_cache",
                               "listings_expiry_time", "max_paths", "skip_instance_cache", "asynchronous",
                               "loop", "cache_regions"})


def check_s3_option_names(storage_options: dict[str, Any]) -> None:
    """Refuse a key of ``cold.storage_options`` that s3fs does not take (a typo).

    Raises:
        ConfigError: Naming the key and the nearest known ones.
    """
    if all(name in COMMON_S3_OPTIONS for name in storage_options):
        return
    known = s3_option_names()
    for name in storage_options:
        if name not in known:
            near = difflib.get_close_matches(str(name), sorted(known), n=3)
            hint = f"did you mean {' or '.join(repr(n) for n in near)}?" if near else \
                f"s3fs takes {', '.join(sorted(known))}"
            raise ConfigError(f"cold.storage_options has the key {name!r}, which s3fs does not take: {hint}")


def _checked_endpoint(*named: tuple[str, str | None]) -> str | None:
    """The first endpoint set among ``named`` (setting, value), checked to be an ``http(s)://`` URL.

    Raises:
        ConfigError: An endpoint without a scheme (``127.0.0.1:9000``), naming where it was set.
    """
    for setting, value in named:
        if not value:
            continue
        if not str(value).startswith(("http://", "https://")):
            raise ConfigError(f"{setting}={value!r} is not a URL: give the scheme too, e.g. http://{value} "
                              f"(or https://{value} for TLS)")
        return str(value)
    return None


@dataclass(frozen=True)
class ColdLocation:
    """Where a dataset lives in the cold tier and how to reach it, resolved once.

    Resolved in the process that reads the configuration and shipped as is to every process
    that reads the cold tier (DataLoader workers, actors on other nodes), so no process falls
    back to other settings because its environment differs. Its options may hold credentials:
    they never appear in its ``repr`` (so neither in logs, errors nor status).

    Attributes:
        url: Prefix URL of the dataset, e.g. ``s3://bucket/digits`` (:func:`canonical_url` when
            resolved).
        storage_options: Resolved fsspec/s3fs options.
        credential_chain: The AWS credential chain's settings captured with them
            (:func:`tierload.stores.cold.aws_chain.capture`; empty off S3 or anonymous).
        credential_provider: The job's ``cold.credential_provider`` (``"package.module:function"``):
            whichever process reads the location (a node cache shared by several jobs) asks this
            function for its credentials, not its own configuration's. It must be importable there.
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False, hash=False)
    credential_chain: tuple[tuple[str, str], ...] = field(default=(), repr=False, hash=False)
    credential_provider: str | None = field(default=None, repr=False, hash=False)

    @classmethod
    def resolve(cls, url: str, config: ColdConfig, environ: dict | None = None) -> "ColdLocation":
        """The location of ``url`` with options from ``config`` (for S3: see :func:`s3_storage_options`).

        For S3 the credential chain's settings in ``environ`` (default ``os.environ``) are
        captured too (:func:`tierload.stores.cold.aws_chain.capture`), so every process that reads
        finds the credentials this one would.
        """
        url = canonical_url(url)
        if fsspec.utils.get_protocol(url) in ("s3", "s3a"):
            options = s3_storage_options(config, environ)
            chain = () if options.get("anon") else aws_chain.capture(options, environ)
            return cls(url, options, chain, config.credential_provider)
        return cls(url, dict(config.storage_options), credential_provider=config.credential_provider)

    @property
    def protocol(self) -> str:
        """The URL's fsspec protocol, e.g. ``s3`` or ``file``."""
        return fsspec.utils.get_protocol(self.url)

    @property
    def endpoint_url(self) -> str:
        """The S3 endpoint the options name (empty when none); part of the manifest's identity."""
        return str((self.storage_options.get("client_kwargs") or {}).get("endpoint_url", ""))

    def __repr__(self) -> str:
        endpoint = f", endpoint_url={self.endpoint_url!r}" if self.endpoint_url else ""
        return f"ColdLocation(url={self.url!r}{endpoint})"


def check_dataset_url(url: object) -> None:
    """The dataset prefix must be a URL with a scheme (``s3://bucket/train``, ``file:///data/train``):
    the scheme picks the cold tier's file system, and one spelling keeps one manifest per prefix.

    Raises:
        ConfigError: Not a string, or no ``scheme://``; for a bare path the message gives the
            ``file://`` URL of that path, or for a relative name that exists nowhere here
            (``bucket/train``) its ``s3://`` URL.
    """
    if not isinstance(url, str):
        raise ConfigError(f"url={url!r}: give the dataset prefix as a URL string, e.g. s3://bucket/train")
    if "://" not in url:
        local = os.path.abspath(os.path.expanduser(url))
        if url.startswith(("/", "~", ".")) or os.path.exists(local):
            raise ConfigError(f"url={url!r}: give the dataset prefix as a URL, e.g. s3://bucket/train, or "
                              f"file://{local} for that local directory")
        # A relative name that is nothing here: far more often a bucket named without its scheme.
        raise ConfigError(f"url={url!r} has no scheme: give s3://{url.lstrip('/')} for that bucket and prefix "
                          f"(there is no local directory {local}; a local one is file:///path/to/dir)")
