"""A local S3 endpoint: moto's server on 127.0.0.1, in a child process, on a free port.

Used by ``tierload demo``, the tests and the benchmarks. The server runs in its own process
so it does not compete with the training loop for the GIL, and exits when its parent does
(it watches its stdin).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from tierload.errors import ServiceError

# moto's dispatcher (moto 5) finds each request's service by listing its own package folder (an
# isdir per service, ~150) and matching every service's URL patterns, twice per S3 request, under one
# lock. The answer depends on the host string alone, so the server remembers it per host. Measured
# (cpuacct, client and server, three interleaved pairs): 1,437 PUTs, a listing and 300 GETs
# 8.9, 9.2, 10.9 -> 7.4, 7.7, 9.0 CPU-s.
_SERVER = r"""
import logging, sys
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import ThreadedMotoServer
try:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    _backend_for_host, _backends = DomainDispatcherApplication.get_backend_for_host, {}

    def _remembered_backend_for_host(self, host):
        if host not in _backends:
            _backends[host] = _backend_for_host(self, host)
        return _backends[host]

    DomainDispatcherApplication.get_backend_for_host = _remembered_backend_for_host
except (ImportError, AttributeError):  # another moto: it dispatches as it does
    pass
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # returns when the parent closes the pipe or exits
server.stop()
"""

CREDENTIALS = {"key": "tierload-local", "secret": "tierload-local-secret"}


def stop_child(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop a server child that exits when its stdin closes; kill it after ``timeout_s`` seconds.

    Closing stdin (not a signal) lets the child shut its server down cleanly, and a child
    whose parent died sees EOF the same way, so it never outlives us.
    """
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()  # the pipe the child announced its port on (else a ResourceWarning)


class LocalS3:
    """moto's S3 server on 127.0.0.1.

    Use as a context manager; ``endpoint_url`` is valid inside it::

        with LocalS3() as s3:
            fs = s3.filesystem()
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self.port = 0
        self._session: tuple[int, Any] | None = None  # (pid, aiobotocore session) for filesystem()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict:
        """s3fs options that reach this server with its dummy credentials."""
        return {**CREDENTIALS, "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"}}

    def start(self, timeout_s: float = 60.0) -> "LocalS3":
        """Start the server and wait until it answers.

        Raises:
            ServiceError: moto is not installed or the server did not come up.
        """
        self._proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        deadline = time.monotonic() + timeout_s
        assert self._proc.stdout is not None  # stdout=PIPE
        line = self._proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            raise ServiceError("moto's S3 server did not start (is moto[server] installed? "
                               "pip install 'tierload[demo]')")
        self.port = int(line)
        while time.monotonic() < deadline:
            try:
                import urllib.request
                urllib.request.urlopen(self.endpoint_url, timeout=2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise ServiceError(f"moto's S3 server at {self.endpoint_url} did not answer within {timeout_s:.0f}s")

    def filesystem(self):
        """A fresh s3fs filesystem on this server (for uploading test data).

        The filesystems one process makes share one aiobotocore session: a new session loads
        botocore's endpoint and S3 models (about 80 ms of CPU, measured 2026-12-02), a client
        from a loaded one about 7 ms, and the tests make one filesystem per bucket. The
        credentials are this server's fixed ones, so the shared session resolves none.
        """
        import aiobotocore.session
        import s3fs

        if self._session is None or self._session[0] != os.getpid():
            self._session = (os.getpid(), aiobotocore.session.AioSession())
        return s3fs.S3FileSystem(skip_instance_cache=True, session=self._session[1], **self.storage_options)

    def create_bucket(self, name: str):
        """Create bucket ``name`` and return an s3fs filesystem on this server."""
        fs = self.filesystem()
        fs.call_s3("create_bucket", Bucket=name)
        fs.invalidate_cache()
        return fs

    def stop(self) -> None:
        if self._proc is not None:
            stop_child(self._proc)
            self._proc = None

    def __enter__(self) -> "LocalS3":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
