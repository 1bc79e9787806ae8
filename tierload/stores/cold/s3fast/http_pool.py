"""HTTP/1.1 GETs on a pool of kept-alive connections: asyncio transports, httptools' parser.

The lean S3 path (:mod:`tierload.stores.cold.s3fast.s3_lean`) sends tens of thousands of small GETs a
second from one event loop, and on that loop aiohttp's client was the cost: per request it
builds a ``ClientRequest``, a ``ClientResponse``, a header multidict, a ``URL``, a timer, a
stream reader, and runs its tracing hooks (py-spy on the node cache in epoch 1 of ``small-s3``:
~60% of the loop thread, which had no idle time left). A GET whose headers are already signed
needs none of that: one ``transport.write`` of the request's bytes, and the answer parsed by
httptools (the llhttp parser uvicorn uses: status, headers, ``Content-Length`` or chunked
bodies, keep-alive). A connection is reused once its answer is complete and the server keeps
it alive; a connection that broke or whose answer was cut off is dropped.

Read timeouts: one sweep per second closes connections that have waited longer than their
timeout since the last bytes arrived (aiohttp's ``sock_read``), instead of a timer per read.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools

SWEEP_INTERVAL_S = 1.0


class ConnectTimeoutError(ConnectionError):
    """No TCP (or TLS) connection within the connect timeout (an endpoint failure, like a refusal)."""


class ResponseBrokenError(ConnectionResetError):
    """The connection closed, failed or stalled before the answer was complete."""


@dataclass(frozen=True)
class Response:
    """One complete answer.

    Attributes:
        status: The HTTP status code.
        headers: Header names (lower case) -> values (latin-1; a repeated header keeps its last value).
        body: The body, de-chunked.
    """

    status: int
    headers: dict[str, str]
    body: bytes


class Origin(NamedTuple):
    """Where connections go: ``scheme`` (``http``/``https``), ``host`` and ``port``.

    A tuple, so the pool's lookups by origin (several per GET) hash in C.
    """

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        """The origin of ``url`` (default ports 80/443)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        return cls(parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_activity = time.monotonic()
        self.read_timeout_s: float | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._complete = False
        self._keep_alive = False

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102 - asyncio's
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:  # noqa: D102 - asyncio's
        self.last_activity = time.monotonic()
        if self._waiter is None:  # bytes nobody asked for: the connection cannot be trusted any more
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ResponseBrokenError(f"unreadable HTTP answer: {exc}"))
            return
        if self._complete:
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102 - asyncio's
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            # S3 delimits every answer (Content-Length or chunked); one the connection's end cuts
            # off, or delimits, is incomplete as far as this client knows.
            waiter.set_exception(ResponseBrokenError(
                f"the server closed the connection before the answer was complete ({exc or 'EOF'})"))

    # ---------------------------------------------------------- parser callbacks
    def on_header(self, name: bytes, value: bytes) -> None:  # noqa: D102 - httptools'
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:  # noqa: D102 - httptools'
        self._body.append(body)

    def on_message_complete(self) -> None:  # noqa: D102 - httptools'
        self._complete = True
        # Asked here: the parser forgets the answer's keep-alive flags once it is complete.
        self._keep_alive = self._parser.should_keep_alive()

    # ------------------------------------------------------------------ requests
    def send(self, request: bytes, read_timeout_s: float | None) -> asyncio.Future:
        """Write ``request`` (a whole GET); the future of its :class:`Response`."""
        assert self.transport is not None and self._waiter is None
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        self._headers, self._body, self._complete, self._keep_alive = {}, [], False, False
        self.read_timeout_s = read_timeout_s
        self.last_activity = time.monotonic()
        self.transport.write(request)
        return waiter

    def reusable(self) -> bool:
        """Whether the last answer left the connection open for another request."""
        return not self.closed and self._waiter is None and self._keep_alive

    def timed_out(self, now: float) -> bool:
        """Whether a request waits past its read timeout since the last bytes arrived."""
        return (self._waiter is not None and self.read_timeout_s is not None
                and now - self.last_activity > self.read_timeout_s)

    def stall(self) -> None:
        """Give up on the request in flight: nothing arrived within its read timeout."""
        self._fail(ResponseBrokenError(f"no bytes for {self.read_timeout_s:g}s (read timeout)"))

    def close(self) -> None:
        """Close the connection (a request in flight fails through :meth:`connection_lost`)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _finish(self) -> None:
        waiter, self._waiter = self._waiter, None
        status = self._parser.get_status_code()
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        if waiter is not None and not waiter.done():
            waiter.set_result(Response(status, self._headers, body))

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


class ConnectionPool:
    """Kept-alive HTTP/1.1 connections of one event loop, at most ``limit`` open per origin.

    Not thread-safe: use it from the loop it was created on (see :func:`shared_pool`).

    Args:
        limit: The most connections open at once per origin (requests beyond wait for one).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._open: dict[Origin, int] = {}
        self._busy: set[_Connection] = set()
        self._freed: dict[Origin, deque[asyncio.Future]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def get(self, origin: Origin, request: bytes, *, connect_timeout_s: float | None = None,
                  read_timeout_s: float | None = None) -> Response:
        """Send ``request`` (the complete bytes of a GET) to ``origin``; its complete answer.

        Raises:
            OSError: No connection could be made (refused, unknown host, ...).
            ConnectTimeoutError: No connection within ``connect_timeout_s`` seconds.
            ResponseBrokenError: The connection broke, or no bytes came for ``read_timeout_s``
                seconds, before the answer was complete.
        """
        connection = await self._acquire(origin, connect_timeout_s)
        self._busy.add(connection)
        try:
            response = await connection.send(request, read_timeout_s)
        except BaseException:
            connection.close()
            self._busy.discard(connection)
            self._forget(origin)
            raise
        self._busy.discard(connection)
        if connection.reusable():
            self._release(origin, connection)
        else:
            connection.close()
            self._forget(origin)
        return response

    def close(self) -> None:
        """Close every connection (requests in flight fail)."""
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        for connection in list(self._busy):
            connection.close()
        self._idle.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    # ------------------------------------------------------------------ internals
    async def _acquire(self, origin: Origin, connect_timeout_s: float | None) -> _Connection:
        while True:
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()  # the most recently used: least likely closed by the server
                if not connection.closed:
                    return connection
                self._open[origin] -= 1
            if self._open.get(origin, 0) < self.limit:
                self._open[origin] = self._open.get(origin, 0) + 1
                try:
                    return await self._connect(origin, connect_timeout_s)
                except BaseException:
                    self._forget(origin)
                    raise
            freed = asyncio.get_running_loop().create_future()
            self._freed.setdefault(origin, deque()).append(freed)
            await freed

    async def _connect(self, origin: Origin, connect_timeout_s: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        context = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        connecting = loop.create_connection(_Connection, origin.host, origin.port, ssl=context)
        try:
            _, connection = await asyncio.wait_for(connecting, connect_timeout_s)
        except asyncio.TimeoutError as exc:
            raise ConnectTimeoutError(f"no connection to {origin.host}:{origin.port} within "
                                      f"{connect_timeout_s:g}s") from exc
        self._start_sweeper()
        return connection

    def _release(self, origin: Origin, connection: _Connection) -> None:
        freed = self._freed.get(origin)
        self._idle.setdefault(origin, deque()).append(connection)
        self._wake(freed)

    def _forget(self, origin: Origin) -> None:
        """A connection of ``origin`` closed (or never opened): its place goes to a waiter."""
        self._open[origin] -= 1
        self._wake(self._freed.get(origin))

    @staticmethod
    def _wake(freed: deque[asyncio.Future] | None) -> None:
        while freed:
            waiter = freed.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _start_sweeper(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(SWEEP_INTERVAL_S, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for connection in [c for c in self._busy if c.timed_out(now)]:
            connection.stall()
        self._sweeper = asyncio.get_running_loop().call_later(SWEEP_INTERVAL_S, self._sweep)


# One pool per (process, event loop, limit): created on the loop that uses it, never inherited
# through fork (a child has another pid and its own loop).
_pools: dict[tuple[int, int, int], tuple[asyncio.AbstractEventLoop, ConnectionPool]] = {}


def shared_pool(limit: int) -> ConnectionPool:
    """The process's connection pool on the running loop: at most ``limit`` connections per origin."""
    loop = asyncio.get_running_loop()
    key = (os.getpid(), id(loop), limit)
    entry = _pools.get(key)
    if entry is None or entry[0] is not loop:
        entry = _pools[key] = (loop, ConnectionPool(limit))
    return entry[1]
