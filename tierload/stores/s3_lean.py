"""One S3 range GET at a small fraction of aiobotocore's CPU: a lean SigV4 signer, one aiohttp pool.

aiobotocore spends ~1 ms of CPU per ``get_object`` (parameter validation, endpoint rules,
event hooks, user agent, response parsing), which caps a process near 800 GETs/s. A GET of a
byte range needs none of that per request: where to send it and how to sign it are the same
for every key of a bucket. So, per (client, bucket), the client itself is asked once for a
GetObject of a probe key through its own endpoint rules (:func:`route_for`; nothing is sent):
they give the URL prefix exactly as the client would build it (endpoint, region, path-style or
virtual-host addressing) and the signing region and service, or show that requests go unsigned
(anonymous access). Each GET is then signed as botocore's ``S3SigV4Auth`` signs it
(:mod:`tierload.stores.sigv4_get`, the signing key derived once a day) over the client's own
credentials object (frozen per request, so refreshable credentials stay refreshable) and sent
on one shared ``aiohttp.ClientSession`` per process and event loop.

What this path does not handle is left to aiobotocore, decided once per filesystem or bucket,
never per failed request (:func:`unsupported_reason`, :func:`route_for`): options that add
headers or change transport (``s3_additional_kwargs``, requester pays, ``verify``, proxies in
the botocore config or the environment, payload or checksum settings, ...), signatures other than SigV4 or none
(SigV2, SigV4a, S3 Express sessions), endpoint rules that add headers or a query, and a
bucket that answers with a redirect to another region (botocore follows those).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import urlsplit
from xml.etree import ElementTree

import aiohttp
from botocore import UNSIGNED
from botocore.auth import _host_from_url
from botocore.utils import percent_encode
from yarl import URL

from tierload.errors import TransientBackendError
from tierload.stores.sigv4_get import sign_get

log = logging.getLogger(__name__)

# s3fs options the lean path reproduces exactly (through the client's own presigned URL and
# credentials); any other option sends every GET of that filesystem through aiobotocore.
_LEAN_CLIENT_KWARGS = {"endpoint_url", "region_name", "use_ssl", "aws_access_key_id", "aws_secret_access_key",
                       "aws_session_token"}
_LEAN_CONFIG_KWARGS = {"connect_timeout", "read_timeout", "retries", "max_pool_connections", "signature_version",
                       "s3", "user_agent", "user_agent_extra"}
_LEAN_S3_CONFIG = {"addressing_style", "use_accelerate_endpoint", "us_east_1_regional_endpoint"}

_PROBE_KEY = "tierload-route-probe"
# Codes for error answers without an XML body (e.g. to a HEAD-like request or from a proxy).
_CODE_OF_STATUS = {404: "NoSuchKey", 412: "PreconditionFailed", 403: "AccessDenied"}
_REDIRECT_CODES = {"PermanentRedirect", "TemporaryRedirect", "AuthorizationHeaderMalformed",
                   "IllegalLocationConstraintException"}


class S3ErrorResponse(Exception):
    """An S3 error answer, shaped like botocore's ``ClientError`` for ``translate_error``.

    Attributes:
        response: ``{"Error": {"Code", "Message"}, "ResponseMetadata": {"HTTPStatusCode"}}``.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}" if message else f"HTTP {status} {code}")
        self.response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


class WrongRegionError(Exception):
    """The bucket lives in another region than the client signs for (botocore would redirect)."""


@dataclass(frozen=True)
class S3Route:
    """How every GET of one bucket is addressed and signed, as the client would do it.

    Attributes:
        prefix: The URL up to the key, e.g. ``http://127.0.0.1:5000/bucket/``.
        region: Signing region; ``None`` when requests go unsigned (anonymous access).
        service: Signing service name (``s3``).
        credentials: The client's botocore credentials object (``None`` when unsigned).
        timeout: Connect and per-read timeouts of the client's configuration.
        host: The ``Host`` header botocore signs for ``prefix`` (derived once, not per request).
        path: The path of ``prefix`` (the signed path of a key is this plus the encoded key).
    """

    prefix: str
    region: str | None
    service: str
    credentials: Any
    timeout: aiohttp.ClientTimeout
    host: str
    path: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", urlsplit(self.prefix).path)

    def url(self, key: str) -> str:
        """The request URL of ``key``, percent-encoded as botocore encodes a key."""
        return self.prefix + percent_encode(key, safe="/~")

    async def headers(self, url: str, extra: dict[str, str]) -> dict[str, str]:
        """``extra`` plus the SigV4 headers of a GET of ``url`` (built by :meth:`url`; none when unsigned)."""
        if self.region is None:
            return extra
        frozen = await self.credentials.get_frozen_credentials()
        return sign_get(frozen, self.region, self.service, self.host, self.path + url[len(self.prefix):], extra)


def unsupported_reason(fs: Any) -> str | None:
    """Why the lean path cannot reproduce ``fs``'s requests (``None`` when it can)."""
    if fs.s3_additional_kwargs or fs.req_kw:
        return f"per-request options {sorted({**fs.s3_additional_kwargs, **fs.req_kw})}"
    extra = set(fs.client_kwargs) - _LEAN_CLIENT_KWARGS
    if extra:
        return f"client_kwargs {sorted(extra)}"
    extra = set(fs.config_kwargs) - _LEAN_CONFIG_KWARGS
    extra |= set((fs.config_kwargs.get("s3") or {})) - _LEAN_S3_CONFIG
    if extra:
        return f"config_kwargs {sorted(extra)}"
    return None


# Routes per aiobotocore client (a rebuilt client, e.g. after a credential refresh, gets new
# ones) and bucket; ``None``: that bucket's GETs go through aiobotocore.
_routes: weakref.WeakKeyDictionary[Any, dict[str, S3Route | None]] = weakref.WeakKeyDictionary()


async def route_for(fs: Any, bucket: str) -> S3Route | None:
    """The lean route of ``bucket`` through ``fs``'s current client, or ``None`` for aiobotocore.

    Must run on ``fs``'s event loop. The first call per client and bucket runs the client's
    endpoint rules once (no request is sent).
    """
    await fs.set_session()
    client = await fs.get_s3(bucket)
    per_bucket = _routes.get(client)
    if per_bucket is None:
        per_bucket = _routes[client] = {}
    if bucket in per_bucket:
        return per_bucket[bucket]
    reason = unsupported_reason(fs)
    route = None if reason else await _probe(client, bucket)
    if reason:
        log.info("S3 GETs of bucket %s go through aiobotocore: the lean path does not handle %s", bucket, reason)
    per_bucket[bucket] = route
    return route


async def use_aiobotocore_for(fs: Any, bucket: str, why: str) -> None:
    """Send every later GET of ``bucket`` through aiobotocore (e.g. it must follow a redirect)."""
    client = await fs.get_s3(bucket)
    _routes.setdefault(client, {})[bucket] = None
    log.warning("S3 GETs of bucket %s go through aiobotocore from now on: %s", bucket, why)


async def _probe(client: Any, bucket: str) -> S3Route | None:
    # The client's own endpoint rules (the step of each aiobotocore call that picks the URL and
    # the signing scheme), once per bucket. Private to botocore, hence checked narrowly: any
    # answer the lean path cannot reproduce leaves the bucket to aiobotocore.
    context: dict[str, Any] = {}
    operation = client.meta.service_model.operation_model("GetObject")
    endpoint, extra_headers, _ = await client._resolve_endpoint_ruleset(
        operation, {"Bucket": bucket, "Key": _PROBE_KEY}, context)
    config = client.meta.config
    auth_type = context.get("auth_type")
    signature = config.signature_version
    why = ""
    if extra_headers:
        why = f"endpoint headers {sorted(extra_headers)}"
    elif auth_type not in ("v4", "none") or signature not in (None, "s3v4", "v4", UNSIGNED):
        why = f"signature {auth_type or signature!r}"
    elif urlsplit(endpoint).query:
        why = f"endpoint URL {endpoint!r}"
    elif _env_proxy_for(endpoint):
        why = "a proxy from the environment (HTTP(S)_PROXY)"
    if why:
        log.info("S3 GETs of bucket %s go through aiobotocore: the lean path does not handle %s", bucket, why)
        return None
    prefix = endpoint.rstrip("/") + "/"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.connect_timeout, sock_read=config.read_timeout)
    if auth_type == "none" or signature is UNSIGNED:
        return S3Route(prefix, None, "s3", None, timeout, _host_from_url(prefix))
    credentials = client._get_credentials()
    if credentials is None:  # aiobotocore raises NoCredentialsError for each request, as before
        return None
    signing = context.get("signing", {})
    return S3Route(prefix, signing.get("region", client.meta.region_name), signing.get("signing_name", "s3"),
                   credentials, timeout, _host_from_url(prefix))


def _env_proxy_for(url: str) -> str | None:
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    return None if proxy is None or urllib.request.proxy_bypass(parts.hostname or "") else proxy


# One session per (process, event loop, pool size): created on the loop that uses it, never
# inherited through fork (a child has another pid and its own loop).
_sessions: dict[tuple[int, int, int], tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession]] = {}


def shared_session(pool_size: int) -> aiohttp.ClientSession:
    """The process's HTTP session on the running loop: ``pool_size`` kept-alive connections."""
    loop = asyncio.get_running_loop()
    key = (os.getpid(), id(loop), pool_size)
    entry = _sessions.get(key)
    if entry is None or entry[0] is not loop or entry[1].closed:
        # No trust_env: it costs a thread hop per request (netrc); an endpoint behind an
        # environment proxy never gets here (_probe leaves it to aiobotocore).
        connector = aiohttp.TCPConnector(limit=pool_size, limit_per_host=0, ttl_dns_cache=60)
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                        skip_auto_headers=("Accept-Encoding",))
        entry = _sessions[key] = (loop, session)
    return entry[1]


@atexit.register
def _close_sessions() -> None:
    for (pid, _, _), (loop, session) in list(_sessions.items()):
        if pid == os.getpid() and loop.is_running() and not session.closed:
            try:
                asyncio.run_coroutine_threadsafe(session.close(), loop).result(1)
            except Exception:  # noqa: BLE001 - best effort at exit; the OS closes the sockets anyway
                pass


def object_size(content_range: str | None) -> int | None:
    """The object's size in bytes from a ``Content-Range: bytes a-b/size`` value (``None``: not given)."""
    total = (content_range or "").rpartition("/")[2]
    return int(total) if total.isdigit() else None


async def get(route: S3Route, session: aiohttp.ClientSession, key: str, start: int, end: int,
              if_match: str | None) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of ``key`` (the whole object when ``end == start``).

    Returns:
        The body, and the object's size in bytes as the answer gives it (``Content-Range`` of a
        range answer; ``None`` when it gives none), so a short body at the object's end can be
        told from a broken one.

    Raises:
        S3ErrorResponse: S3 answered with an error (its code, for ``translate_error``).
        WrongRegionError: The bucket is in another region (a redirect botocore would follow).
        TransientBackendError: The connection broke or timed out after it was made.
        aiohttp.ClientConnectorError: The endpoint cannot be reached at all.
    """
    url = route.url(key)
    extra = {}
    if end > start:
        extra["Range"] = f"bytes={start}-{end - 1}"
    if if_match:
        extra["If-Match"] = if_match
    headers = await route.headers(url, extra)
    try:
        async with session.get(URL(url, encoded=True), headers=headers, allow_redirects=False,
                               timeout=route.timeout) as response:
            body = await response.read()
            if response.status == 206:
                return body, object_size(response.headers.get("Content-Range"))
            if response.status == 200:
                return body, len(body)
            _raise_error(response.status, response.headers, body)
    except (aiohttp.ClientConnectorError, S3ErrorResponse, WrongRegionError):
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise TransientBackendError(f"S3 GET broke off: {type(exc).__name__}: {exc}", tier="cold",
                                    url=url) from exc


def _raise_error(status: int, headers: Any, body: bytes) -> NoReturn:
    code, message = "", ""
    if body.lstrip().startswith(b"<"):
        try:
            root = ElementTree.fromstring(body)
            code, message = root.findtext("Code") or "", root.findtext("Message") or ""
        except ElementTree.ParseError:
            pass
    code = code or _CODE_OF_STATUS.get(status, str(status))
    if (status in (301, 307) or code in _REDIRECT_CODES) and "x-amz-bucket-region" in headers:
        raise WrongRegionError(f"HTTP {status} {code}: the bucket is in region {headers['x-amz-bucket-region']}")
    raise S3ErrorResponse(status, code, message)
