"""A fault-injecting HTTP proxy in front of moto's S3 server, for the real-world failure cases.

Requests are forwarded unchanged (aiohttp, on its own event-loop thread); rules decide per
request whether to answer with an S3 error instead, to cut the body short, to slow it down or
never to answer it. :meth:`FaultyS3.refuse_connections_for` closes the port for a while (an
endpoint outage: connections refused). It also counts the GETs it receives per object key (and
the body bytes it answers them with), and the access key id every signed request carries (moto
accepts any key: this is how a test proves which credentials a process used);
``refused_on_prefix`` answers one key's requests under a prefix with 403 AccessDenied, as an IAM
policy would, and ``request_times`` records when every request
arrived (a request-rate limit is checked on them). Tests get one through the ``faulty_s3`` fixture
(tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

_ACCESS_KEY = re.compile(r"Credential=([^/]+)/")


@dataclass
class FaultMix:
    """A random mix of faults on GETs, seeded: each GET draws one (or none).

    Attributes:
        error_503: Share of GETs answered ``503 ServiceUnavailable``.
        slow_down: Share answered ``503 SlowDown``.
        stall: Share that get no answer for ``stall_s`` seconds, then a closed connection.
        reset: Share whose body breaks off halfway (connection closed).
        stall_s: How long a stalled GET hangs (longer than the client's read timeout).
        seed: Seed of the draws.
    """

    error_503: float = 0.0
    slow_down: float = 0.0
    stall: float = 0.0
    reset: float = 0.0
    stall_s: float = 2.0
    seed: int = 0
    injected: Counter = field(default_factory=Counter)  # GETs per fault drawn

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def draw(self) -> str | None:
        """The fault of the next GET (``None``: forwarded unchanged), counted in ``injected``."""
        point = self._rng.random()
        for name in ("error_503", "slow_down", "stall", "reset"):
            point -= getattr(self, name)
            if point < 0:
                self.injected[name] += 1
                return name
        return None

import aiohttp
import yarl
from aiohttp import web


@dataclass
class Faults:
    """What to break. Keys are object keys without the bucket (e.g. ``ds/a.bin``)."""

    expired_access_keys: set[str] = field(default_factory=set)  # GETs signed with these: ExpiredToken
    truncate_once: set[str] = field(default_factory=set)        # next GET of these: drop the connection at 50%
    truncate_always: set[str] = field(default_factory=set)      # every GET of these: drop the connection at 50%
    verify_secret: str | None = None                             # GETs whose SigV4 signature is wrong: 403
    bad_signatures: int = 0
    signed_headers: list[tuple[str, ...]] = field(default_factory=list)  # per verified GET
    slow_down_once: set[str] = field(default_factory=set)      # next GET of these: 503 SlowDown
    slow_down_always: set[str] = field(default_factory=set)    # every GET of these: 503 SlowDown
    never_answer: set[str] = field(default_factory=set)        # GETs of these get no answer while listed
    slow_chunk_s: float = 0.0                                    # sleep per 64 KiB chunk of every GET body
    first_byte_s: float = 0.0                                    # sleep before forwarding every GET
    mix: FaultMix | None = None                                  # random faults on every GET
    allowed_access_keys: set[str] = field(default_factory=set)  # if set, other signed requests: 403
    # access key id -> "bucket/prefix": its signed requests under that prefix (objects, HEADs, listings)
    # are answered 403 AccessDenied, as an IAM policy that denies the key the prefix would
    refused_on_prefix: dict[str, str] = field(default_factory=dict)
    refused: Counter = field(default_factory=Counter)           # requests refused so, per access key id
    request_times: list[float] = field(default_factory=list)    # time.monotonic() of every request received
    access_keys: Counter = field(default_factory=Counter)       # signed requests per access key id
    gets: Counter = field(default_factory=Counter)
    get_bytes: Counter = field(default_factory=Counter)         # body bytes of the GETs answered, per object key
    clients: Counter = field(default_factory=Counter)            # GETs per (user agent's first word, signed?)
    request_payers: list[str] = field(default_factory=list)     # each GET's x-amz-request-payer, where sent
    open_gets: int = 0                                           # GETs being answered now
    max_open_gets: int = 0                                       # the most GETs ever answered at once


class FaultyS3:
    """Proxy on 127.0.0.1 (a free port) to ``upstream``; use as a context manager."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.faults = Faults()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._closing = False

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _object_key(self, request: web.Request) -> str:
        return request.path.lstrip("/").split("/", 1)[-1]

    def _target(self, request: web.Request) -> str:
        """``bucket/key`` a request names: its object, or for a listing its bucket and ``prefix``."""
        path = request.path.lstrip("/")
        if "list-type" in request.query or ("/" not in path.rstrip("/") and "prefix" in request.query):
            return f"{path.rstrip('/')}/{request.query.get('prefix', '')}"
        return path

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.faults.request_times.append(time.monotonic())
        key = self._object_key(request)
        is_get = request.method == "GET" and "list-type" not in request.query and key and "/" in request.path[1:]
        signed_by = _ACCESS_KEY.search(request.headers.get("Authorization", ""))
        if signed_by:
            self.faults.access_keys[signed_by.group(1)] += 1
            if self.faults.allowed_access_keys and signed_by.group(1) not in self.faults.allowed_access_keys:
                body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>'
                        b"<Message>The AWS Access Key Id you provided does not exist in our records.</Message>"
                        b"</Error>")
                return web.Response(status=403, body=body, content_type="application/xml")
            prefix = self.faults.refused_on_prefix.get(signed_by.group(1))
            if prefix is not None and self._target(request).startswith(prefix):
                self.faults.refused[signed_by.group(1)] += 1
                body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                        b"<Message>Access Denied</Message></Error>")
                return web.Response(status=403, body=body, content_type="application/xml")
        if not is_get:
            return await self._forward(request, key, is_get)
        self.faults.open_gets += 1  # one event loop: no lock needed
        self.faults.max_open_gets = max(self.faults.max_open_gets, self.faults.open_gets)
        try:
            if self.faults.first_byte_s:
                await asyncio.sleep(self.faults.first_byte_s)
            drawn = self.faults.mix.draw() if self.faults.mix else None
            if drawn is not None:
                self.faults.gets[key] += 1
                return await self._inject(request, key, drawn)
            if key in self.faults.never_answer:
                self.faults.gets[key] += 1
                while key in self.faults.never_answer and not self._closing:
                    await asyncio.sleep(0.05)
                request.transport.close()
                return web.Response(status=500)
            return await self._forward(request, key, is_get)
        finally:
            self.faults.open_gets -= 1

    async def _forward(self, request: web.Request, key: str, is_get: bool, counted: bool = False) -> web.StreamResponse:
        if is_get:
            if not counted:
                self.faults.gets[key] += 1
            auth = request.headers.get("Authorization", "")
            agent = request.headers.get("User-Agent", "").split(" ")[0].split("/")[0]
            self.faults.clients[agent, bool(auth)] += 1
            if "x-amz-request-payer" in request.headers:
                self.faults.request_payers.append(request.headers["x-amz-request-payer"])
            if self.faults.verify_secret and auth and not self._signature_matches(request, auth):
                self.faults.bad_signatures += 1
                body = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code></Error>'
                return web.Response(status=403, body=body, content_type="application/xml")
            if key in self.faults.slow_down_once or key in self.faults.slow_down_always:
                self.faults.slow_down_once.discard(key)
                body = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code></Error>'
                return web.Response(status=503, body=body, content_type="application/xml")
            if any(f"Credential={k}/" in auth for k in self.faults.expired_access_keys):
                body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ExpiredToken</Code>'
                        b"<Message>The provided token has expired.</Message></Error>")
                return web.Response(status=400, body=body, content_type="application/xml")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        # The path as sent (raw_path keeps "..", "//" and escapes), not re-normalised on the way to moto.
        upstream_url = yarl.URL(self.upstream + request.raw_path, encoded=True)
        async with self._session.request(request.method, upstream_url, headers=headers,
                                         data=await request.read(), allow_redirects=False) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items()
                           if k.lower() not in ("transfer-encoding", "content-encoding", "connection", "server",
                                                "date")}
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            if is_get and (key in self.faults.truncate_once or key in self.faults.truncate_always) and len(payload) > 1:
                self.faults.truncate_once.discard(key)
                await response.write(payload[:len(payload) // 2])
                request.transport.close()  # the stream breaks off halfway
                return response
            if is_get and upstream.status in (200, 206):
                self.faults.get_bytes[key] += len(payload)
            for start in range(0, len(payload), 65536):
                if is_get and self.faults.slow_chunk_s:
                    await asyncio.sleep(self.faults.slow_chunk_s)
                await response.write(payload[start:start + 65536])
            await response.write_eof()
            return response

    async def _inject(self, request: web.Request, key: str, fault: str) -> web.StreamResponse:
        """Answer a GET with one fault of :class:`FaultMix`."""
        if fault in ("error_503", "slow_down"):
            code = b"ServiceUnavailable" if fault == "error_503" else b"SlowDown"
            body = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>' + code + b"</Code></Error>"
            return web.Response(status=503, body=body, content_type="application/xml")
        if fault == "stall":
            await asyncio.sleep(self.faults.mix.stall_s if self.faults.mix else 0)
            request.transport.close()
            return web.Response(status=500)
        self.faults.truncate_once.add(key)  # "reset": this GET's body breaks off halfway
        return await self._forward(request, key, True, counted=True)

    def _signature_matches(self, request: web.Request, auth: str) -> bool:
        """Recompute the request's SigV4 signature with botocore and ``verify_secret``, as S3 would."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        fields = dict(part.strip().split("=", 1) for part in auth.removeprefix("AWS4-HMAC-SHA256 ").split(","))
        key, _, region, service, _ = fields["Credential"].split("/")
        self.faults.signed_headers.append(tuple(fields["SignedHeaders"].split(";")))
        headers = {name: request.headers[name] for name in fields["SignedHeaders"].split(";") if name != "host"}
        signed = AWSRequest(method=request.method, url=f"http://{request.host}{request.raw_path}", headers=headers)
        signed.context["timestamp"] = request.headers["X-Amz-Date"]
        signer = S3SigV4Auth(Credentials(key, self.faults.verify_secret), service, region)
        expected = signer.signature(signer.string_to_sign(signed, signer.canonical_request(signed)), signed)
        return expected == fields["Signature"]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start():
            self._session = aiohttp.ClientSession(auto_decompress=False)
            app = web.Application(client_max_size=1 << 30)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = self._site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def refuse_connections_for(self, seconds: float) -> threading.Event:
        """Close the port and every open connection for ``seconds``; the event is set once it is open again."""
        reopened = threading.Event()
        closed = threading.Event()

        async def outage():
            await self._site.stop()
            for handler in list(self._runner.server.connections):
                handler.force_close()
            closed.set()
            await asyncio.sleep(seconds)
            self._site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            await self._site.start()
            reopened.set()

        asyncio.run_coroutine_threadsafe(outage(), self._loop)
        closed.wait(10)  # refused from the moment this returns
        return reopened

    def __enter__(self) -> "FaultyS3":
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._closing = True

        async def stop():
            await self._runner.cleanup()
            await self._session.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
