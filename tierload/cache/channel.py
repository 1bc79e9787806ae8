"""The local control channel between training processes and their node's cache actor.

DataLoader workers are forked or spawned by PyTorch; a Ray connection inherited through
fork is unusable, and a fresh ``ray.init`` per worker costs seconds and hundreds of MiB.
So consumers never talk to Ray: the node cache actor also listens on a Unix socket
(``multiprocessing.connection``, authenticated with a random key), and a consumer opens its
own connection lazily in whichever process it finds itself (pid-checked). Messages are
small, batched control calls; block bytes normally never cross it (they are read from the
hot tier's files), except for blocks the hot tier refused, which arrive zstd-compressed.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import Any

from tierload.errors import ChannelLostError, MethodNotAllowedError, ServiceError, TierloadError

log = logging.getLogger(__name__)


class ChannelServer:
    """Serves method calls on ``target`` to local clients, one thread per connection.

    Args:
        target: Object whose methods are served.
        address: Unix socket path.
        authkey: Shared secret (bytes) clients must present.
        where: Description of the serving process, attached to errors sent back.
        methods: The names of the methods of ``target`` clients may call (the allow-list);
            a call to any other name is refused with :class:`MethodNotAllowedError`.
    """

    def __init__(self, target: Any, address: str, authkey: bytes, where: str, methods: frozenset[str]) -> None:
        self.target = target
        self.address = address
        self.authkey = authkey
        self.where = where
        self.methods = frozenset(methods)
        if os.path.exists(address):
            os.unlink(address)  # a stale socket of a dead actor on the same path
        self._listener = Listener(address, family="AF_UNIX", authkey=authkey)
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="tierload-channel", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):
                if self._closed:
                    return
                continue
            except Exception:  # noqa: BLE001 - a bad handshake must not stop the server
                log.debug("rejected a channel connection", exc_info=True)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="tierload-channel-conn", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            while True:
                try:
                    oneway, method, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                try:
                    if method not in self.methods:
                        raise MethodNotAllowedError(f"{method!r} is not served over this channel; it serves "
                                                    f"{', '.join(sorted(self.methods))}", where=self.where)
                    result = getattr(self.target, method)(*args, **kwargs)
                    reply = (True, result)
                except Exception as exc:  # noqa: BLE001 - every error goes back to the caller
                    error: Exception
                    if isinstance(exc, TierloadError):
                        exc.remote_traceback = traceback.format_exc()
                        error = exc
                    else:
                        error = ServiceError(f"{type(exc).__name__}: {exc}", where=self.where,
                                             remote_traceback=traceback.format_exc())
                    reply = (False, error)
                    if oneway:
                        log.error("one-way call %s failed in %s: %s", method, self.where, exc, exc_info=True)
                if not oneway:
                    try:
                        conn.send(reply)
                    except (OSError, EOFError):
                        return

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.close()
        finally:
            if os.path.exists(self.address):
                os.unlink(self.address)


class ChannelClient:
    """A consumer's connection to its node cache. Pickles to its address only.

    Args:
        address: The server's Unix socket path.
        authkey: The server's secret.
    """

    def __init__(self, address: str, authkey: bytes) -> None:
        self.address = address
        self.authkey = authkey
        self._conn: Connection | None = None
        self._pid = -1
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def __getstate__(self):
        return {"address": self.address, "authkey": self.authkey}

    def __setstate__(self, state):
        ChannelClient.__init__(self, state["address"], state["authkey"])

    def _process_lock(self) -> threading.Lock:
        """This process's lock. A lock copied by fork may have been held by another thread of the
        parent at that instant and would stay locked forever in the child, so each process
        starts with a fresh one (and a fresh connection)."""
        if self._lock_pid != os.getpid():
            self._lock = threading.Lock()
            self._lock_pid = os.getpid()
            self._conn = None
        return self._lock

    def _connection(self) -> Connection:
        if self._conn is None or self._pid != os.getpid():
            # A connection inherited through fork belongs to the parent: never reuse it.
            try:
                self._conn = Client(self.address, family="AF_UNIX", authkey=self.authkey)
            except (OSError, EOFError, AuthenticationError) as exc:  # a restarted cache has a new key
                raise ChannelLostError(f"cannot reach the node cache at {self.address}: {exc}; is the cache actor "
                                       "running on this node?") from exc
            self._pid = os.getpid()
        return self._conn

    def call(self, method: str, *args, **kwargs) -> Any:
        """Call ``method`` on the node cache and return its result (re-raising its error)."""
        with self._process_lock():
            conn = self._connection()
            try:
                conn.send((False, method, args, kwargs))
                ok, result = conn.recv()
            except (OSError, EOFError) as exc:
                self._conn = None
                raise ChannelLostError(f"the node cache at {self.address} went away during {method}: {exc}") from exc
        if not ok:
            raise result
        return result

    def notify(self, method: str, *args, **kwargs) -> None:
        """Send a one-way call (no reply; errors are logged by the server)."""
        with self._process_lock():
            conn = self._connection()
            try:
                conn.send((True, method, args, kwargs))
            except (OSError, EOFError) as exc:
                self._conn = None
                raise ChannelLostError(f"the node cache at {self.address} went away during {method}: {exc}") from exc

    def close(self) -> None:
        with self._process_lock():
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
