"""The node cache's local channel under hostile or broken clients (issue 13, item 3).

Real Unix sockets, real threads; the end-to-end test runs a real TieredDataset on moto's S3
and a local Ray with two DataLoader workers while the bad clients hold their connections.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from multiprocessing.connection import Client
from typing import Protocol

import pytest
import torch
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.errors import ChannelLostError
from tierload.wire.channel import ChannelClient, ChannelServer

KEY = b"k" * 32


class _EchoAPI(Protocol):
    def echo(self, value: int) -> int: ...


class _Target(_EchoAPI):
    def echo(self, value):
        return value


@pytest.fixture
def address():
    own = tempfile.mkdtemp(prefix="tl-chan-")  # a directory of its own, short enough for a socket path
    yield os.path.join(own, "chan.sock")
    shutil.rmtree(own, ignore_errors=True)


def _server(address, **kwargs) -> ChannelServer:
    return ChannelServer(_Target(), address, KEY, where="test server", interface=_EchoAPI, **kwargs)


@contextmanager
def _silent_client(address):
    """Connects and says nothing."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    try:
        yield sock
    finally:
        sock.close()


@contextmanager
def _slow_client(address):
    """Announces a 32-byte handshake answer, then sends one byte of it a second."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    stop = threading.Event()

    def trickle():
        try:
            sock.sendall(struct.pack("!i", 32))
            while not stop.wait(1.0):
                sock.sendall(b"x")
        except OSError:
            pass  # hung up on

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield sock
    finally:
        stop.set()
        sock.close()
        thread.join()


@contextmanager
def _garbage_client(address):
    """Sends random bytes (a frame too long for a handshake answer, then noise) and stays connected."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    try:
        sock.sendall(os.urandom(4096))
    except OSError:
        pass  # the server may hang up before all of it is sent
    try:
        yield sock
    finally:
        sock.close()


def _wrong_key_attempt(address) -> Exception | None:
    try:
        Client(address, family="AF_UNIX", authkey=b"w" * 32).close()
    except Exception as exc:  # noqa: BLE001 - the test inspects what it got
        return exc
    return None


def _call_within(client: ChannelClient, seconds: float):
    """``echo(1)`` on a thread; its result, or a failure if it took longer than ``seconds``."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(client.call(_EchoAPI.echo, 1)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert result == [1], f"a good client was not served within {seconds} s"


def test_bad_clients_never_delay_a_good_one(address):
    """Case F05. With a handshake deadline far longer than the test, a good client is still served at once."""
    server = _server(address, handshake_timeout_s=120)
    good = ChannelClient(address, KEY)
    try:
        with _silent_client(address), _slow_client(address), _garbage_client(address):
            assert _wrong_key_attempt(address) is not None
            _call_within(good, 3.0)
            other = ChannelClient(address, KEY)
            _call_within(other, 3.0)
            other.close()
    finally:
        good.close()
        server.close()


def test_a_silent_client_is_hung_up_on_after_the_handshake_deadline(address):
    """Case F05: a silent client holds only its own connection, and only until the handshake deadline"""
    server = _server(address, handshake_timeout_s=0.5)
    try:
        with _silent_client(address) as sock:
            sock.settimeout(10)
            started = time.monotonic()
            received = b""
            while True:  # the server's challenge, then end of file
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
            assert time.monotonic() - started < 5
            assert received  # it was challenged before being hung up on
    finally:
        server.close()


def test_connections_beyond_the_limit_are_closed_and_slots_come_back(address):
    server = _server(address, handshake_timeout_s=1.0, max_connections=2)
    try:
        with _silent_client(address), _silent_client(address):
            time.sleep(0.2)  # both accepted and holding their slots
            with pytest.raises(ChannelLostError):
                ChannelClient(address, KEY).call(_EchoAPI.echo, 1)
            time.sleep(1.5)  # their handshake deadline passed: slots released
            client = ChannelClient(address, KEY)
            _call_within(client, 3.0)
            client.close()
    finally:
        server.close()


def test_a_malformed_message_after_the_handshake_ends_only_that_connection(address):
    server = _server(address)
    try:
        broken = Client(address, family="AF_UNIX", authkey=KEY)
        broken.send_bytes(b"not a pickle")
        with pytest.raises(EOFError):
            broken.recv()
        broken.close()
        good = ChannelClient(address, KEY)
        _call_within(good, 3.0)
        good.close()
    finally:
        server.close()


def test_close_removes_the_socket_file(address):
    server = _server(address)
    assert os.path.exists(address)
    server.close()
    assert not os.path.exists(address)


def _collect(batch):
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def test_every_sample_arrives_while_bad_clients_hold_connections(bucket, tier_config, make_dataset):
    """Case F05. Item 3 end to end: a silent, a slow, a garbage-sending and a wrong-key client are connected
    to the node cache's channel while 2 DataLoader workers (which open their own connections
    during the epoch) iterate a real TieredDataset; every sample arrives once."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(warm=None), layout="files", batch_size=4)
    address = dataset._endpoint.address
    with ExitStack() as bad:
        bad.enter_context(_silent_client(address))
        bad.enter_context(_slow_client(address))
        bad.enter_context(_garbage_client(address))
        assert _wrong_key_attempt(address) is not None
        loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_collect, timeout=60)
        got = [index_of(sample) for samples, _ in loader for sample in samples]
    assert sorted(got) == list(range(40))
