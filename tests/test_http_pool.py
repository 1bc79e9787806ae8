"""The lean S3 path's connection pool (tierload.stores.cold.s3fast.http_pool) against a real HTTP server
(and the same server behind TLS with a certificate from a test CA, made by ``trustme``).

The server is a small asyncio TCP server on a thread of its own, answering by path: a body of
N bytes, a chunked body, an answer that closes the connection, one cut off mid-body, one
that never comes. It counts the connections it accepts, so reuse is seen on the server side.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time

import pytest
import trustme

from tierload.stores.cold.s3fast.http_pool import ConnectionPool, Origin, ResponseBrokenError


class ScriptedServer:
    """HTTP/1.1 answers by path, on 127.0.0.1; ``accepted`` counts TCP connections."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                if not await self._answer(path, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    @staticmethod
    async def _answer(path: str, writer: asyncio.StreamWriter) -> bool:
        """Write the answer to ``path``; whether the connection stays open."""
        kind, _, arg = path.strip("/").partition("/")
        if kind == "bytes":
            body = bytes(range(256)) * (int(arg) // 256) + bytes(int(arg) % 256)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Echo: %s\r\n\r\n%s"
                         % (len(body), arg.encode(), body))
        elif kind == "chunked":
            writer.write(b"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Range: bytes 0-9/99\r\n\r\n3\r\nabc\r\n7\r\ndefghij\r\n0\r\n\r\n")
        elif kind == "then-close":  # answers as if keeping the connection, then closes it (an idle timeout)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbye!")
            await writer.drain()
            return False
        elif kind == "close":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            return False
        elif kind == "cut":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
            await writer.drain()
            return False
        elif kind == "stall":
            await asyncio.sleep(30)
            return False
        await writer.drain()
        return True


def request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


def run(coroutine):
    return asyncio.run(coroutine)


def test_answers_are_exact_and_connections_are_kept_alive_and_bounded():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=8)
            sizes = [0, 1, 255, 4096, 70_000] * 40
            answers = await asyncio.gather(*(pool.get(origin, request(f"/bytes/{n}")) for n in sizes))
            again = [await pool.get(origin, request("/bytes/10")) for _ in range(20)]
            pool.close()
            return sizes, answers, again

        sizes, answers, again = run(main())
        for size, answer in zip(sizes, answers, strict=True):
            assert answer.status == 200 and answer.headers["x-echo"] == str(size)
            assert answer.body == bytes(range(256)) * (size // 256) + bytes(size % 256)
        assert all(answer.body == bytes(10) for answer in again)
        # 220 requests, at most 8 connections at once, all of them reused afterwards
        assert server.accepted <= 8


def test_a_chunked_answer_is_dechunked_and_its_headers_read():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=2)
            first = await pool.get(origin, request("/chunked"))
            second = await pool.get(origin, request("/chunked"))
            pool.close()
            return first, second

        first, second = run(main())
        assert first.status == second.status == 206
        assert first.body == second.body == b"abcdefghij"
        assert first.headers["content-range"] == "bytes 0-9/99"
        assert server.accepted == 1


def test_connection_close_is_honoured_and_the_next_request_gets_a_new_connection():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=1)
            answers = [await pool.get(origin, request("/close")) for _ in range(3)]
            pool.close()
            return answers

        assert [answer.body for answer in run(main())] == [b"ok"] * 3
        assert server.accepted == 3


def test_a_kept_alive_connection_the_server_closed_meanwhile_is_not_reused():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=1)
            first = await pool.get(origin, request("/then-close"))
            await asyncio.sleep(0.2)  # the server's close arrives while the connection is idle
            second = await pool.get(origin, request("/bytes/7"), read_timeout_s=2)
            pool.close()
            return first, second

        first, second = run(main())
        assert (first.body, second.body) == (b"bye!", bytes(7))
        assert server.accepted == 2


def test_an_answer_cut_off_is_broken_and_the_pool_recovers():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=1)
            with pytest.raises(ResponseBrokenError, match="before the answer was complete"):
                await pool.get(origin, request("/cut"))
            answer = await pool.get(origin, request("/bytes/5"))  # the one place was given back
            pool.close()
            return answer

        assert run(main()).body == bytes(5)


def test_an_answer_that_never_comes_fails_after_the_read_timeout():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=1)
            started = time.monotonic()
            with pytest.raises(ResponseBrokenError, match="read timeout"):
                await pool.get(origin, request("/stall"), read_timeout_s=0.5)
            waited = time.monotonic() - started
            answer = await pool.get(origin, request("/bytes/3"), read_timeout_s=0.5)
            pool.close()
            return waited, answer

        waited, answer = run(main())
        assert 0.5 <= waited < 5
        assert answer.body == bytes(3)


def test_a_refused_connection_raises_the_os_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens on it

    async def main():
        pool = ConnectionPool(limit=2)
        with pytest.raises(ConnectionRefusedError):
            await pool.get(Origin("http", "127.0.0.1", port), request("/bytes/1"), connect_timeout_s=5)
        pool.close()

    run(main())


def test_origin_of_a_url():
    assert Origin.of("http://127.0.0.1:5000/bucket/") == Origin("http", "127.0.0.1", 5000)
    assert Origin.of("https://s3.eu-west-1.amazonaws.com/") == Origin("https", "s3.eu-west-1.amazonaws.com", 443)
    with pytest.raises(ValueError, match="not an http"):
        Origin.of("s3://bucket/key")


def test_https_checks_the_certificate_against_the_trusted_authorities(tmp_path, monkeypatch):
    """The pool's TLS context is the default one: certificates are verified, against the system's
    authorities (here a test CA named by SSL_CERT_FILE, as a private S3 endpoint's CA would be)."""
    authority = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_tls)
    with ScriptedServer(tls=server_tls) as server:
        origin = Origin("https", "127.0.0.1", server.port)

        async def fetch(path):
            pool = ConnectionPool(limit=2)
            try:
                return [await pool.get(origin, request(path)) for _ in range(3)]
            finally:
                pool.close()

        with pytest.raises(ssl.SSLCertVerificationError):  # a CA nobody trusts: refused
            run(fetch("/bytes/10"))
        ca_file = tmp_path / "ca.pem"
        authority.cert_pem.write_to_path(str(ca_file))
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        answers = run(fetch("/bytes/5000"))
        assert [a.body for a in answers] == [bytes(range(256)) * 19 + bytes(136)] * 3
        assert server.accepted == 1  # the three GETs on one kept-alive connection (a refused handshake is not counted)
