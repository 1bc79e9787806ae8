"""Many range reads in flight through obstore (Rust ``object_store``), behind the range reader's interface.

:class:`ObstoreRangeReader` is :class:`~tierload.stores.cold.async_reads.S3RangeReader` with
one request swapped: the retry loop, the in-flight limit (``cold.max_in_flight``, halved on
throttling), the request split at ``cold.max_request_bytes``, the short-body check and the
counting stay the reader's, so every engine follows one policy. Each request is one
``obstore.get_async`` with the range and ``If-Match`` on the recorded ETag (the version is a
condition on the read itself, not a second request); the request runs outside the GIL on
obstore's own runtime and is awaited from any asyncio loop.

obstore's errors are shaped here, in one place, as the S3 answers that
:func:`tierload.stores.cold.errors.translate_error` and the retry layer already know (412 ->
``PreconditionFailed``, 404 -> ``NoSuchKey``, 416 -> ``InvalidRange``, 5xx and 429 ->
transient, a refused or timed-out connection -> the endpoint's failure), so a URL in an error
is always the store's (``az://container/key``), never an internal HTTP URL.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tierload.stores.cold.async_reads import S3RangeReader
from tierload.stores.cold.obstore_exit import guard_running_loop
from tierload.stores.cold.obstore_stores import S3_SCHEMES, client_for, import_obstore, split_url

if TYPE_CHECKING:
    from tierload.stores.cold.source import ColdSource

_STATUS = re.compile(r"(?:status(?: code)?:?\s*|Status \{\s*status:\s*)(\d{3})", re.IGNORECASE)
_CODE_OF_STATUS = {404: "NoSuchKey", 412: "PreconditionFailed", 416: "InvalidRange", 403: "AccessDenied",
                   401: "AccessDenied", 429: "SlowDown", 503: "SlowDown"}
_ERROR_CODE = re.compile(r"<Code>(\w+)</Code>")
_REQUEST_URL = re.compile(r"((?:GET|HEAD|PUT|POST) )https?://\S+")
_UNREACHABLE = ("connection refused", "error trying to connect", "tcp connect error", "dns error",
                "failed to lookup address")
# A body cut off mid-stream (hyper's IncompleteBody under reqwest's "response body error").
_BROKEN_BODY = ("body error", "incompletebody", "unexpectedeof", "unexpected eof", "broken pipe")
_TIMED_OUT = ("timed out", "timeout", "deadline has elapsed")
# The largest range whose body is read in place once its headers have come (``GetResult.bytes()``,
# which waits outside the GIL), not through a second future. A body this small travels in the same
# flight as its headers (8 KiB and the headers fit a TCP initial window of 10 segments, RFC 6928), so
# it is there to take. The second future was a third of the client's CPU per 4 KiB object: its answer
# crosses from obstore's runtime thread to the loop (the GIL, the loop's self-pipe, a wake-up), 346-393
# -> 228-248 us (benchmarks/results/2026-12-03-small-bodies/). The price: a small body that the network
# holds back (a lost segment, resent after the retransmission timeout) holds the loop as long.
IN_PLACE_BODY_MAX_BYTES = 8 * 1024


class StoreAnswer(Exception):
    """A store's error answer, shaped like botocore's ``ClientError`` for ``translate_error``.

    Attributes:
        response: ``{"Error": {"Code", "Message"}, "ResponseMetadata": {"HTTPStatusCode"}}``.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


class BodyBrokenError(ConnectionError):
    """An answer's body broke off before its end: that object's request failed (retried within
    ``cold.max_attempts``), not the endpoint (which answered)."""


def shaped_error(exc: BaseException) -> BaseException:
    """``exc`` (an obstore error) as the exception that :func:`translate_error` classifies right.

    Its first line only: obstore's messages carry a debug dump with the store's internal URLs.
    """
    from obstore.exceptions import NotFoundError, PermissionDeniedError, PreconditionError, UnauthenticatedError

    text = str(exc)
    first = _REQUEST_URL.sub(r"\1", text.split("\n", 1)[0])[:300]
    if isinstance(exc, PreconditionError):
        return StoreAnswer(412, "PreconditionFailed", first)
    if isinstance(exc, NotFoundError):
        return StoreAnswer(404, "NoSuchKey", first)
    if isinstance(exc, PermissionDeniedError | UnauthenticatedError):
        return StoreAnswer(403, "AccessDenied", first)
    found = _STATUS.search(text)
    if found:
        status = int(found.group(1))
        code = _ERROR_CODE.search(text)  # the store's own error code in the body (S3's ExpiredToken, ...)
        return StoreAnswer(status, code.group(1) if code else _CODE_OF_STATUS.get(status, str(status)), first)
    lowered = text.lower()
    if "range" in lowered and ("not satisfiable" in lowered or "out of bounds" in lowered):
        return StoreAnswer(416, "InvalidRange", first)
    if any(word in lowered for word in _UNREACHABLE):
        return ConnectionRefusedError(first)
    if any(word in lowered for word in _TIMED_OUT):
        return TimeoutError(first)
    if any(word in lowered for word in _BROKEN_BODY):
        return BodyBrokenError(f"the answer broke off before its end: {first}")
    if "connection" in lowered or "error sending request" in lowered:
        # Broke off after it was made, or reqwest's "error sending request" with no cause in the
        # text (a kept-alive connection closed under the request, seen in an outage): the
        # endpoint's failure while nothing else answers, within cold.outage_budget_s.
        return ConnectionResetError(first)
    return exc


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def obstore_addresses(key: str) -> bool:
    """Whether obstore's ``Path`` names ``key`` exactly, as S3 does.

    object_store's ``Path::parse`` refuses an empty, ``.`` or ``..`` segment and control
    characters, and drops a leading or trailing ``/`` (so ``/a`` would read the object ``a``):
    S3 keys may have all of these (``tests/test_manifest.py``'s nasty keys).
    """
    return not _CONTROL.search(key) and all(part not in ("", ".", "..") for part in key.split("/"))


def quoted(etag: str) -> str:
    """An ETag as an ``If-Match`` value and a version (``"..."``; some stores list it bare)."""
    return etag if etag.startswith(('"', 'W/"')) else f'"{etag}"'


class ObstoreRangeReader(S3RangeReader):
    """Reads byte ranges of one :class:`ColdSource`'s objects through obstore, many at once.

    An S3 key obstore cannot name exactly (:func:`obstore_addresses`) is read through
    aiobotocore instead, request by request.

    Args:
        source: The cold source whose options, configuration and credential refresh are used.
    """

    def __init__(self, source: ColdSource) -> None:
        super().__init__(source)
        self._obstore = import_obstore(source.protocol)
        self._scheme = source.protocol
        # (bucket, credentials generation) -> client: looked up once per reader, not per GET
        self._clients: dict[tuple[str, int], Any] = {}

    def bucket_and_key(self, url: str) -> tuple[str, str]:
        _scheme, root, path = split_url(url)
        return root, path

    async def _get_object(self, bucket: str, key: str, version: str, start: int,
                          end: int) -> tuple[bytes, int | None]:
        if self._scheme in S3_SCHEMES and not obstore_addresses(key):
            return await super()._get_object(bucket, key, version, start, end)  # aiobotocore sends any key
        known = (bucket, self._source.credentials_generation)
        store = self._clients.get(known)
        if store is None:
            store = self._clients[known] = client_for(self._source, self._scheme, bucket)
        options: dict[str, Any] = {}
        if end > start:
            options["range"] = (start, end)
        if version.startswith('"'):
            options["if_match"] = version
        guard_running_loop()  # its answer is delivered before the interpreter may finalize
        try:
            result = await self._obstore.get_async(store, key, options=options)
            if 0 < end - start <= IN_PLACE_BODY_MAX_BYTES:
                data = bytes(result.bytes())
            else:
                data = bytes(await result.bytes_async())
        except Exception as exc:
            shaped = shaped_error(exc)
            if shaped is exc:
                raise
            raise shaped from exc
        return data, int(result.meta["size"])

    async def prepare(self, bucket: str) -> None:
        """Make this process's client for ``bucket`` now (no request is sent)."""
        client_for(self._source, self._scheme, bucket)
