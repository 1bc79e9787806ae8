"""One S3 range GET at a small fraction of aiobotocore's CPU: a lean SigV4 signer, one connection pool.

aiobotocore spends ~1 ms of CPU per ``get_object`` (parameter validation, endpoint rules,
event hooks, user agent, response parsing), which caps a process near 800 GETs/s. A GET of a
byte range needs none of that per request: where to send it and how to sign it are the same
for every key of a bucket. So, per (client, bucket), the client itself is asked once for a
GetObject of a probe key through its own endpoint rules (:func:`route_for`; nothing is sent):
they give the URL prefix exactly as the client would build it (endpoint, region, path-style or
virtual-host addressing) and the signing region and service, or show that requests go unsigned
(anonymous access). Each GET is then signed as botocore's ``S3SigV4Auth`` signs it
(:mod:`tierload.stores.cold.s3fast.sigv4_get`, the signing key derived once a day) over the client's own
credentials object (frozen per request, so refreshable credentials stay refreshable) and sent
as one write on a kept-alive connection of one shared pool per process and event loop
(:mod:`tierload.stores.cold.s3fast.http_pool`: asyncio transports and httptools' parser, without aiohttp's
per-request objects).

What this path does not handle is left to aiobotocore, decided once per filesystem or bucket,
never per failed request (:func:`unsupported_reason`, :func:`route_for`): options that add
headers or change transport (``s3_additional_kwargs``, requester pays, ``verify``, proxies in
the botocore config or the environment, payload or checksum settings, ...), signatures other than SigV4 or none
(SigV2, SigV4a, S3 Express sessions), endpoint rules that add headers or a query, and a
bucket that answers with a redirect to another region (botocore follows those).
"""

from __future__ import annotations

import logging
import urllib.request
import weakref
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import urlsplit
from xml.etree import ElementTree

from botocore import UNSIGNED
from botocore.auth import _host_from_url
from botocore.utils import percent_encode

from tierload.errors import TransientBackendError
from tierload.stores.cold.s3fast.http_pool import ConnectionPool, Origin, ResponseBrokenError
from tierload.stores.cold.s3fast.sigv4_get import sign_get

log = logging.getLogger(__name__)

# s3fs options the lean path reproduces exactly (through the client's own presigned URL and
# credentials); any other option sends every GET of that filesystem through aiobotocore.
_LEAN_CLIENT_KWARGS = {"endpoint_url", "region_name", "use_ssl", "aws_access_key_id", "aws_secret_access_key",
                       "aws_session_token"}
_LEAN_CONFIG_KWARGS = {"connect_timeout", "read_timeout", "retries", "max_pool_connections", "signature_version",
                       "s3", "user_agent", "user_agent_extra"}
_LEAN_S3_CONFIG = {"addressing_style", "use_accelerate_endpoint", "us_east_1_regional_endpoint"}

_PROBE_KEY = "tierload-route-probe"
# Sent unsigned (SigV4 leaves User-Agent out), so S3's logs and a proxy can tell these GETs apart.
_USER_AGENT = "User-Agent: tierload-lean\r\n"
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
        connect_timeout_s: Seconds to open a connection (the client's ``connect_timeout``).
        read_timeout_s: Seconds without bytes before an answer is given up (``read_timeout``).
        host: The ``Host`` header botocore signs for ``prefix`` (derived once, not per request).
        path: The path of ``prefix`` (the signed path of a key is this plus the encoded key).
        origin: Where the connections go (scheme, host, port of ``prefix``).
    """

    prefix: str
    region: str | None
    service: str
    credentials: Any
    connect_timeout_s: float | None
    read_timeout_s: float | None
    host: str
    path: str = field(init=False)
    origin: Origin = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", urlsplit(self.prefix).path)
        object.__setattr__(self, "origin", Origin.of(self.prefix))

    def url(self, key: str) -> str:
        """The request URL of ``key``, percent-encoded as botocore encodes a key."""
        return self.prefix + percent_encode(key, safe="/~")

    async def headers(self, url: str, extra: dict[str, str]) -> dict[str, str]:
        """``Host``, ``extra`` and the SigV4 headers of a GET of ``url`` (built by :meth:`url`; no SigV4
        headers when unsigned)."""
        if self.region is None:
            return {"Host": self.host, **extra}
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
    timeouts = (config.connect_timeout, config.read_timeout)
    if auth_type == "none" or signature is UNSIGNED:
        return S3Route(prefix, None, "s3", None, *timeouts, _host_from_url(prefix))
    credentials = client._get_credentials()
    if credentials is None:  # aiobotocore raises NoCredentialsError for each request, as before
        return None
    signing = context.get("signing", {})
    return S3Route(prefix, signing.get("region", client.meta.region_name), signing.get("signing_name", "s3"),
                   credentials, *timeouts, _host_from_url(prefix))


def _env_proxy_for(url: str) -> str | None:
    parts = urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    return None if proxy is None or urllib.request.proxy_bypass(parts.hostname or "") else proxy


def object_size(content_range: str | None) -> int | None:
    """The object's size in bytes from a ``Content-Range: bytes a-b/size`` value (``None``: not given)."""
    total = (content_range or "").rpartition("/")[2]
    return int(total) if total.isdigit() else None


async def get(route: S3Route, pool: ConnectionPool, key: str, start: int, end: int,
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
        OSError: The endpoint cannot be reached at all (refused, unknown host, connect timeout).
    """
    url = route.url(key)
    extra = {}
    if end > start:
        extra["Range"] = f"bytes={start}-{end - 1}"
    if if_match:
        extra["If-Match"] = if_match
    headers = await route.headers(url, extra)
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"GET {route.path}{url[len(route.prefix):]} HTTP/1.1\r\n{lines}{_USER_AGENT}\r\n".encode("latin-1")
    try:
        response = await pool.get(route.origin, request, connect_timeout_s=route.connect_timeout_s,
                                  read_timeout_s=route.read_timeout_s)
    except ResponseBrokenError as exc:
        raise TransientBackendError(f"S3 GET broke off: {type(exc).__name__}: {exc}", tier="cold",
                                    url=url) from exc
    if response.status == 206:
        return response.body, object_size(response.headers.get("content-range"))
    if response.status == 200:
        return response.body, len(response.body)
    _raise_error(response.status, response.headers, response.body)


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
