"""An HTTP proxy in front of fake-gcs-server that enforces read preconditions as real GCS does.

fake-gcs-server (0.1.1's binary) ignores every precondition on a read: ``If-Match``,
``x-goog-if-generation-match`` and the JSON API's ``ifGenerationMatch`` alike, so a test against
it alone cannot tell a pinned read from an unpinned one. Real Cloud Storage honours them on its
XML API, the API obstore (Rust ``object_store`` 0.14) reads through: recorded at this proxy,
obstore sends one ``GET /<bucket>/<percent-encoded object>`` per range with ``Range:
bytes=a-b`` and ``If-Match: <the listed ETag>``, and lists with ``GET /<bucket>?list-type=2``.

What real GCS does, per its documentation:

- ``If-Match`` (an ETag) and ``x-goog-if-generation-match`` (a generation) are request headers
  of the XML API; a request whose precondition does not hold fails with ``412 Precondition
  Failed`` and serves no bytes.
  https://cloud.google.com/storage/docs/request-preconditions ,
  https://cloud.google.com/storage/docs/xml-api/reference-headers (``If-Match``,
  ``x-goog-if-generation-match``; ``ETag`` and ``x-goog-generation`` on every object GET).
- The ETag a listing gives and the one a GET answers with are the same value; it changes
  whenever the object's data does (a new generation).

So this proxy forwards every request unchanged, and on an object GET or HEAD that carries a
precondition it checks it against the version the emulator itself answered with (the response's
``ETag`` and ``X-Goog-Generation`` headers: the version of the very bytes that would be
served, so an overwrite between check and read cannot slip through); when it does not hold, the
client gets ``412`` with GCS's XML error body and none of the bytes. ``If-Match`` is compared
strongly (RFC 9110 13.1.1: a weak ``W/`` tag never matches; ``*`` matches any object); a tag
sent bare is compared as its quoted form, because fake-gcs-server lists its ETags unquoted.
A missing object stays the emulator's own 404.

:meth:`GcsPreconditions.reads_of` gives every object GET and HEAD (not listings, not the JSON
API) as a :class:`Read`, and :meth:`GcsPreconditions.requests_to` every request of any kind: what
a test checks to prove the condition rode on each range request itself, with no second request
to learn the version.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from paging_proxy import HOP_BY_HOP, send_answer

_PRECONDITION_FAILED = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>PreconditionFailed</Code>"
                        b"<Message>At least one of the pre-conditions you specified did not hold.</Message></Error>")


@dataclass(frozen=True)
class Read:
    """One object GET or HEAD the proxy answered.

    Attributes:
        method: ``GET`` or ``HEAD``.
        bucket: The bucket in the path.
        name: The object's name (percent-decoded).
        range: The ``Range`` header sent (``None``: the whole object).
        if_match: The ``If-Match`` header sent (``None``: none).
        if_generation_match: The ``x-goog-if-generation-match`` header sent (``None``: none).
        status: The status the client got (412 where the proxy refused it).
    """

    method: str
    bucket: str
    name: str
    range: str | None
    if_match: str | None
    if_generation_match: str | None
    status: int


def _quoted(tag: str) -> str:
    return tag if tag.startswith(('"', "W/")) else f'"{tag}"'


def if_match_holds(wanted: str, etag: str | None) -> bool:
    """Whether an ``If-Match`` header value ``wanted`` holds for an object whose ETag is ``etag``
    (strong comparison, RFC 9110 13.1.1; ``*`` holds for any object)."""
    if etag is None:
        return False
    current = _quoted(etag.strip())
    for candidate in (part.strip() for part in wanted.split(",")):
        if candidate == "*":
            return True
        if candidate.startswith("W/") or current.startswith("W/"):
            continue  # a weak tag never matches strongly
        if _quoted(candidate) == current:
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _object(self) -> tuple[str, str] | None:
        """``(bucket, name)`` of an XML-API object request; ``None`` for a listing, the JSON API or an upload."""
        parts = urlsplit(self.path)
        if self.command not in ("GET", "HEAD") or "list-type" in parts.query:
            return None
        bucket, _, name = parts.path.lstrip("/").partition("/")
        if not name or bucket in ("storage", "upload", "download", "_internal"):
            return None
        return bucket, unquote(name)

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection(self.server.upstream_host, self.server.upstream_port, timeout=30)
        try:
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
            if body:
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            status, answer_headers, payload = answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()
        self.server.note(self.command, self.path)
        target = self._object()
        if target is not None:
            status = self._checked(status, dict((name.lower(), value) for name, value in answer_headers))
            self.server.record(Read(self.command, *target, self.headers.get("Range"), self.headers.get("If-Match"),
                                    self.headers.get("x-goog-if-generation-match"), status))
        if status == HTTPStatus.PRECONDITION_FAILED:
            answer_headers = [("Content-Type", "application/xml; charset=UTF-8")]
            payload = _PRECONDITION_FAILED
        send_answer(self, status, answer_headers, payload)

    def _checked(self, status: int, answered: dict[str, str]) -> int:
        """The status real GCS would answer: 412 where a precondition does not hold for the
        version the emulator answered with."""
        if status not in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT, HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE):
            return status  # a missing object stays 404
        wanted_etag = self.headers.get("If-Match")
        if wanted_etag is not None and not if_match_holds(wanted_etag, answered.get("etag")):
            return HTTPStatus.PRECONDITION_FAILED
        wanted_generation = self.headers.get("x-goog-if-generation-match")
        if wanted_generation is not None and wanted_generation.strip() != answered.get("x-goog-generation"):
            return HTTPStatus.PRECONDITION_FAILED
        return status

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.reads: list[Read] = []
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def note(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def record(self, read: Read) -> None:
        with self._lock:
            self.reads.append(read)


class GcsPreconditions:
    """:class:`_Handler` on a free port of 127.0.0.1 in front of fake-gcs-server at ``upstream``.

    Args:
        upstream: The emulator's origin, ``http://127.0.0.1:<port>``.
    """

    def __init__(self, upstream: str) -> None:
        self.server = _Server(upstream)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def reads_of(self, bucket: str) -> list[Read]:
        """The object reads recorded so far in ``bucket``, in arrival order."""
        with self.server._lock:
            return [read for read in self.server.reads if read.bucket == bucket]

    def requests_to(self, bucket: str) -> list[tuple[str, str]]:
        """``(method, path)`` of every request (any API) that named ``bucket``, in arrival order."""
        with self.server._lock:
            return [(method, path) for method, path in self.server.requests if bucket in path]

    def __enter__(self) -> GcsPreconditions:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class CheckedGcs:
    """A fake-gcs-server written to directly and read through :class:`GcsPreconditions`: the
    face of :class:`store_servers.FakeGcs` (``create_bucket``, ``put``, ``storage_options``) with
    its reads checked as real GCS checks them, and ``proxy.reads_of(bucket)`` to see them."""

    def __init__(self, emulator, proxy: GcsPreconditions) -> None:
        self.emulator, self.proxy = emulator, proxy
        self.url = proxy.url

    def create_bucket(self, name: str) -> None:
        self.emulator.create_bucket(name)

    def put(self, bucket: str, name: str, data: bytes) -> None:
        self.emulator.put(bucket, name, data)

    @property
    def storage_options(self) -> dict:
        return {"base_url": self.proxy.url, "skip_signature": True}
