"""An emulated remote S3: a reverse proxy with first-byte latency and bandwidth caps.

The proxy (aiohttp, in its own process so it never shares a GIL with a contender) sits on
127.0.0.1 in front of a local S3 server (moto's, see :class:`tierload_tools.s3local.LocalS3`) and
shapes every response:

* **first-byte latency**: a request's response headers leave no earlier than
  ``latency_ms`` after the request arrived (``asyncio.sleep``, no CPU is burnt; if the
  server itself is slower, its own time stands);
* **per-connection bandwidth**: each response body is paced to ``connection_mb_s``
  (HTTP/1.1 serves one request at a time per connection, so this caps each connection);
* **total bandwidth**: all response bodies together share ``total_mb_s`` (a FIFO token
  timeline, 64 KiB chunks, a 10 ms burst allowance).

Uploads (PUT bodies) pass unshaped: the benchmark times reads. Buckets named with
``--bucket NAME=SPEC`` are answered by the proxy itself from its own copy (a stored or a
synthetic bucket, see :mod:`tierload_tools.bench.own_buckets` and :mod:`tierload_tools.bench.s3_answers`),
with the same latency, bandwidth and counters, so small-object workloads are not limited by
moto's few hundred GETs per second; every other bucket goes to moto. The proxy counts what it
serves, so every contender's S3 traffic is measured the same way: object GETs and their
body bytes, LISTs, HEADs, PUTs. ``GET /__bench__/counters`` returns them as JSON, and
``GET /__bench__/timeline?since=T&until=T`` the GETs and body bytes per 50 ms of wall-clock
time (:mod:`tierload_tools.bench.link_timeline`).

How this maps to real S3 (documented in benchmarks/README.md): S3's time to first byte is
~10-50 ms for small objects from EC2 in the same region; one connection streams ~50-100 MB/s;
an instance's link (10-100 Gbit/s) is filled only with many connections. The defaults keep
those ratios at a scale one 2-core machine can serve: latency as measured on S3, and a total
cap below what moto can serve here, with a per-connection cap a quarter of it, so that a
loader needs at least 4 concurrent requests (and, with the latency, several more) to fill
the link.

Run as a program: ``python -m tierload_tools.bench.emulated_s3 --upstream URL [...]`` prints the
port it listens on, then serves until its stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass
from typing import IO

from tierload_tools.bench.link_timeline import TIMELINE_PATH, LinkTimeline
from tierload_tools.bench.own_buckets import OwnBucket, parse_spec
from tierload_tools.bench.s3_answers import answer as s3_answer

CHUNK_BYTES = 64 * 1024
BURST_S = 0.010
CONTROL_PREFIX = "/__bench__/"
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade", "host", "expect", "content-length"}


@dataclass(frozen=True)
class LinkSettings:
    """The emulated link.

    Attributes:
        latency_ms: First-byte latency of every request, in milliseconds.
        connection_mb_s: Bandwidth of one connection in MB/s (10^6 bytes/s); 0 = unlimited.
        total_mb_s: Bandwidth of all connections together in MB/s; 0 = unlimited.
    """

    latency_ms: float = 20.0
    connection_mb_s: float = 4.0
    total_mb_s: float = 16.0

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.connection_mb_s < 0 or self.total_mb_s < 0:
            raise ValueError(f"link settings must be >= 0, got {self}")

    @property
    def cap_bytes_s(self) -> float:
        """The tightest total bandwidth in bytes/s (inf when unlimited)."""
        return self.total_mb_s * 1e6 if self.total_mb_s else float("inf")

    def describe(self) -> str:
        def mb(value: float) -> str:
            return f"{value:g} MB/s" if value else "unlimited"
        return (f"first-byte latency {self.latency_ms:g} ms, {mb(self.connection_mb_s)} per connection, "
                f"{mb(self.total_mb_s)} in total")


class _Pacer:
    """A FIFO token timeline: ``take(n)`` returns once ``n`` bytes fit under ``rate``."""

    def __init__(self, bytes_per_s: float) -> None:
        self.rate = bytes_per_s
        self.next_free = 0.0

    async def take(self, count: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        self.next_free = max(now, self.next_free) + count / self.rate
        delay = self.next_free - now - BURST_S
        if delay > 0:
            await asyncio.sleep(delay)


def _is_object_path(path: str) -> bool:
    parts = path.lstrip("/").split("/", 1)
    return len(parts) == 2 and parts[1] != ""


def _split_bucket(path: str) -> tuple[str, str]:
    bucket, _, key = path.lstrip("/").partition("/")
    return bucket, key


class _OwnServer:
    """Answers the buckets the proxy serves itself, shaped and counted like proxied ones."""

    def __init__(self, buckets: dict[str, OwnBucket], link: LinkSettings, counters: Counter, total: _Pacer,
                 timeline: LinkTimeline) -> None:
        self.buckets, self.link, self.counters, self.total = buckets, link, counters, total
        self.timeline = timeline

    async def respond(self, request, bucket_name: str, key: str, arrived: float):
        from aiohttp import web

        reply = s3_answer(self.buckets[bucket_name], bucket_name, key, request.method, request.headers,
                          request.query)
        self.counters[f"{reply.kind}_requests"] += 1
        if reply.kind == "get":
            self.timeline.add_get(time.time())
        if reply.status >= 400:
            self.counters[f"{reply.kind}_errors"] += 1
        wait = self.link.latency_ms / 1000.0 - (time.monotonic() - arrived)
        if wait > 0:
            await asyncio.sleep(wait)
        body = reply.body or b""
        self.counters[f"{reply.kind}_bytes"] += len(body)
        if not (self.link.connection_mb_s or self.link.total_mb_s) or not body:
            self.timeline.add_bytes(len(body), time.time())
            return web.Response(status=reply.status, headers=reply.headers, body=reply.body)
        response = web.StreamResponse(status=reply.status, headers={**reply.headers, "Content-Length": str(len(body))})
        await response.prepare(request)
        connection = _Pacer(self.link.connection_mb_s * 1e6)
        for start in range(0, len(body), CHUNK_BYTES):
            chunk = body[start:start + CHUNK_BYTES]
            await connection.take(len(chunk))
            await self.total.take(len(chunk))
            await response.write(chunk)
            self.timeline.add_bytes(len(chunk), time.time())
        await response.write_eof()
        return response


def _control_handler(counters: Counter, link: LinkSettings, timeline: LinkTimeline):
    """The handler of ``/__bench__/``: counters (``reset`` clears them) and the link's timeline."""
    from aiohttp import web

    async def control(request):
        if request.path == TIMELINE_PATH:
            return web.json_response(timeline.window(float(request.query["since"]), float(request.query["until"])))
        if request.path.endswith("/reset"):
            counters.clear()
        return web.json_response({"counters": dict(counters), "link": asdict(link), "time": time.time()})

    return control


def _make_app(upstream: str, link: LinkSettings, own: dict[str, OwnBucket] | None = None):
    import aiohttp
    from aiohttp import web

    counters: Counter = Counter()
    total = _Pacer(link.total_mb_s * 1e6)
    timeline = LinkTimeline()
    state: dict = {}
    own_server = _OwnServer(own or {}, link, counters, total, timeline)

    async def on_startup(app) -> None:
        state["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=120))

    async def on_cleanup(app) -> None:
        await state["session"].close()

    control = _control_handler(counters, link, timeline)

    async def proxy(request):
        if request.path.startswith(CONTROL_PREFIX):
            return await control(request)
        arrived = time.monotonic()
        bucket_name, key = _split_bucket(request.path)
        if bucket_name in own_server.buckets:
            return await own_server.respond(request, bucket_name, key, arrived)
        body = await request.read() if request.can_read_body else None
        method = request.method
        is_get = method == "GET" and _is_object_path(request.path)
        kind = ("get" if is_get else "list" if method == "GET" else method.lower())
        counters[f"{kind}_requests"] += 1
        if is_get:
            timeline.add_get(time.time())
        if body:
            counters[f"{kind}_upload_bytes"] += len(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with state["session"].request(method, upstream + request.path_qs, headers=headers, data=body,
                                            allow_redirects=False) as upstream_response:
            wait = link.latency_ms / 1000.0 - (time.monotonic() - arrived)
            if wait > 0:
                await asyncio.sleep(wait)
            out_headers = {k: v for k, v in upstream_response.headers.items()
                           if k.lower() not in _HOP_BY_HOP - {"content-length"}}
            response = web.StreamResponse(status=upstream_response.status, headers=out_headers)
            if upstream_response.status >= 400:
                counters[f"{kind}_errors"] += 1
            await response.prepare(request)
            connection = _Pacer(link.connection_mb_s * 1e6)
            async for chunk in upstream_response.content.iter_chunked(CHUNK_BYTES):
                await connection.take(len(chunk))
                await total.take(len(chunk))
                await response.write(chunk)
                counters[f"{kind}_bytes"] += len(chunk)
                if is_get:
                    timeline.add_bytes(len(chunk), time.time())
            await response.write_eof()
            return response

    app = web.Application(client_max_size=2**31)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


async def _serve(upstream: str, link: LinkSettings, port: int, own: dict[str, OwnBucket]) -> None:
    from aiohttp import web

    runner = web.AppRunner(_make_app(upstream.rstrip("/"), link, own), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    server = site._server
    assert server is not None and hasattr(server, "sockets")  # started above
    bound = server.sockets[0].getsockname()[1]
    print(bound, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="URL of the S3 server to front")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=LinkSettings.latency_ms)
    parser.add_argument("--connection-mb-s", type=float, default=LinkSettings.connection_mb_s)
    parser.add_argument("--total-mb-s", type=float, default=LinkSettings.total_mb_s)
    parser.add_argument("--bucket", action="append", default=[], metavar="NAME=SPEC",
                        help="a bucket served by the proxy itself (see tierload_tools.bench.own_buckets)")
    args = parser.parse_args(argv)
    link = LinkSettings(args.latency_ms, args.connection_mb_s, args.total_mb_s)
    own = dict(parse_spec(spec) for spec in args.bucket)
    asyncio.run(_serve(args.upstream, link, args.port, own))


# --------------------------------------------------------------------------- the client side
def read_counters(endpoint_url: str, reset: bool = False) -> dict[str, int]:
    """The proxy's counters (``get_requests``, ``get_bytes``, ``list_requests``, ...)."""
    path = "reset" if reset else "counters"
    with urllib.request.urlopen(f"{endpoint_url}{CONTROL_PREFIX}{path}", timeout=30) as response:
        return json.loads(response.read())["counters"]


class EmulatedS3:
    """The proxy process in front of ``upstream_url``; a context manager.

    Args:
        upstream_url: The real (local) S3 endpoint, e.g. ``LocalS3().endpoint_url``.
        link: Latency and bandwidth to emulate.
        own_buckets: Buckets the proxy answers itself: ``{name: spec}``, the spec as
            :func:`tierload_tools.bench.own_buckets.parse_spec` reads it (after ``NAME=``).
    """

    def __init__(self, upstream_url: str, link: LinkSettings = LinkSettings(),
                 own_buckets: dict[str, str] | None = None) -> None:
        self.upstream_url = upstream_url
        self.link = link
        self.own_buckets = dict(own_buckets or {})
        self.port = 0
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[str] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "EmulatedS3":
        """Start the proxy process and wait for its port.

        Raises:
            RuntimeError: The proxy did not start (its stderr is in the message).
        """
        link = self.link
        stderr = self._stderr = tempfile.TemporaryFile(mode="w+")
        proc = self._proc = subprocess.Popen(
            [sys.executable, "-m", "tierload_tools.bench.emulated_s3", "--upstream", self.upstream_url,
             "--latency-ms", str(link.latency_ms), "--connection-mb-s", str(link.connection_mb_s),
             "--total-mb-s", str(link.total_mb_s),
             *[f"--bucket={name}={spec}" for name, spec in self.own_buckets.items()]],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
        line = proc.stdout.readline().strip() if proc.stdout is not None else ""
        if not line.isdigit():
            proc.wait(timeout=10)
            stderr.seek(0)
            error = stderr.read()
            self.stop()
            raise RuntimeError(f"the emulated S3 proxy did not start: {error.strip()[-2000:]}")
        self.port = int(line)
        return self

    def counters(self) -> dict[str, int]:
        return read_counters(self.endpoint_url)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        if self._proc is not None:
            # imported here: s3local imports the library, and contenders in the peers' environment
            # (which lacks its dependencies) import this module for read_counters
            from tierload_tools.s3local import stop_child

            stop_child(self._proc)
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> "EmulatedS3":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    main()
