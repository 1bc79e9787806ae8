"""An HTTP proxy in front of a store's emulator that makes its listings span many small pages.

Real stores answer a listing in pages (S3 and GCS 1,000 keys, Azure 5,000); a test that lists a
handful of objects never sees a second page. This proxy forwards every request unchanged, except
the listings:

- ``azure``: a List Blobs request gets ``maxresults=<page_keys>`` added, and Azurite itself pages
  its answer (``NextMarker``), which the client sends back as ``marker``. Authenticate with a SAS
  token: a SAS signs the resource and permissions, not the other query parameters (a Shared Key
  signature would not survive the added parameter).
- ``gcs``: fake-gcs-server's XML listing ignores ``max-keys`` and answers everything at once, so
  the proxy cuts that answer into pages itself: ``IsTruncated`` and ``NextContinuationToken`` (an
  offset), as GCS's XML API sends them, honouring the ``continuation-token`` the client sends.

``listings`` counts the listing requests answered, ``tokens`` the continuation the client sent
with each (``None`` for the first page).
"""

from __future__ import annotations

import http.client
import threading
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def send_answer(handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
    """Answer the client with ``status``, the upstream's end-to-end ``headers`` and ``payload``
    (its own length; no body to a HEAD)."""
    handler.send_response(status)
    for name, value in headers:
        if name.lower() not in HOP_BY_HOP:
            handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(payload)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _forward(self, method: str, path: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(self.server.upstream_host, self.server.upstream_port, timeout=30)
        try:
            headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
            if body:
                headers["Content-Length"] = str(len(body))
            upstream.request(method, path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            upstream.close()

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = urlsplit(self.path)
        query = parse_qsl(parts.query, keep_blank_values=True)
        names = {name for name, _ in query}
        path = self.path
        paged = None
        if self.command == "GET" and self.server.kind == "azure" and ("comp", "list") in query:
            self.server.note({**dict(query)}.get("marker"))
            if "maxresults" not in names:
                path = f"{parts.path}?{urlencode([*query, ('maxresults', str(self.server.page_keys))])}"
        elif self.command == "GET" and self.server.kind == "gcs" and "list-type" in names:
            token = dict(query).get("continuation-token")
            self.server.note(token)
            paged = int(token or 0)
            path = f"{parts.path}?{urlencode([(n, v) for n, v in query if n != 'continuation-token'])}"
        status, headers, payload = self._forward(self.command, path, body)
        if paged is not None and status == 200:
            payload = _gcs_page(payload, paged, self.server.page_keys)
        send_answer(self, status, headers, payload)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


def _gcs_page(payload: bytes, start: int, page_keys: int) -> bytes:
    """The page of an XML ``ListBucketResult`` from entry ``start``, at most ``page_keys`` entries."""
    root = ET.fromstring(payload)
    namespace = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    contents = root.findall(f"{namespace}Contents")
    for entry in contents:
        root.remove(entry)
    for tag in ("IsTruncated", "NextContinuationToken", "KeyCount"):
        for stale in root.findall(f"{namespace}{tag}"):
            root.remove(stale)
    page = contents[start:start + page_keys]
    for entry in page:
        root.append(entry)
    more = start + page_keys < len(contents)
    ET.SubElement(root, f"{namespace}IsTruncated").text = "true" if more else "false"
    ET.SubElement(root, f"{namespace}KeyCount").text = str(len(page))
    if more:
        ET.SubElement(root, f"{namespace}NextContinuationToken").text = str(start + page_keys)
    return ET.tostring(root, xml_declaration=True, encoding="UTF-8")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, kind: str, page_keys: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.kind, self.page_keys = kind, page_keys
        self.listings = 0
        self.tokens: list[str | None] = []
        self._lock = threading.Lock()

    def note(self, token: str | None) -> None:
        with self._lock:
            self.listings += 1
            self.tokens.append(token)


class PagingProxy:
    """:class:`_Handler` on a free port of 127.0.0.1 in front of ``upstream`` (``http://host:port``).

    Args:
        upstream: The emulator's origin.
        kind: ``azure`` or ``gcs`` (see the module's docstring).
        page_keys: Keys per listing page.
    """

    def __init__(self, upstream: str, kind: str, page_keys: int) -> None:
        self.server = _Server(upstream, kind, page_keys)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def listings(self) -> int:
        return self.server.listings

    @property
    def tokens(self) -> list[str | None]:
        return self.server.tokens

    def __enter__(self) -> PagingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
