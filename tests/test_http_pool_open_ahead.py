"""Connections opened ahead (``ConnectionPool.open_ahead``, issue 25): the lean S3 path's pool opens
its connections while the job starts, so epoch 1's GETs find them open. Against the real HTTP
server of ``tests/test_http_pool.py``, which counts the TCP connections it accepts."""

from __future__ import annotations

import asyncio
import socket

from test_http_pool import ScriptedServer, request

from tierload.stores.cold.s3fast.http_pool import ConnectionPool, Origin


def test_connections_opened_ahead_serve_the_gets_that_follow_and_never_pass_the_limit():
    with ScriptedServer() as server:
        origin = Origin("http", "127.0.0.1", server.port)

        async def main():
            pool = ConnectionPool(limit=8)
            opened = await pool.open_ahead(origin, 20)  # more than the limit: 8 at most
            await asyncio.sleep(0.2)  # the server's accept loop counts them (waiting, not timing)
            accepted_ahead = server.accepted
            answers = await asyncio.gather(*(pool.get(origin, request(f"/bytes/{n}")) for n in range(40)))
            again = await pool.open_ahead(origin, 8)  # all 8 are open already: none more
            pool.close()
            return opened, accepted_ahead, answers, again

        opened, accepted_ahead, answers, again = asyncio.run(main())
        assert opened == 8 and accepted_ahead == 8
        assert [len(answer.body) for answer in answers] == list(range(40))
        assert server.accepted == 8  # every GET took a connection opened ahead
        assert again == 0


def test_a_refused_connection_opened_ahead_is_left_to_the_get_and_frees_its_place():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    origin = Origin("http", "127.0.0.1", port)

    async def main():
        pool = ConnectionPool(limit=4)
        opened = await pool.open_ahead(origin, 4)
        try:
            await pool.get(origin, request("/bytes/1"), connect_timeout_s=5)
        except OSError as exc:
            return opened, exc
        return opened, None

    opened, error = asyncio.run(main())
    assert opened == 0
    assert isinstance(error, ConnectionRefusedError)  # the GET meets the failure itself, and has a place to try
