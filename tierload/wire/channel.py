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
import socket
import threading
import traceback
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge
from typing import Any, Callable, Concatenate, ParamSpec, TypeVar

from tierload.errors import ChannelLostError, MethodNotAllowedError, ServiceError, TierloadError
from tierload.stores.dir_trust import PRIVATE_FILE_MODE
from tierload.wire.api import api_methods, call_name
from tierload.wire.messages import ChannelCall

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger(__name__)

# A client has this long to pass the key handshake (a few ms for a real consumer, seconds on a
# badly overloaded machine); a silent or slow one is hung up on, and it only ever holds its own
# thread meanwhile, so a generous deadline costs no other client anything.
HANDSHAKE_TIMEOUT_S = 10.0
# Open connections at most (pending handshakes included): a node's training processes and their
# DataLoader workers need one each, a few dozen; beyond this a new connection is closed at once.
MAX_CONNECTIONS = 256
_LISTEN_BACKLOG = 128


class ChannelServer:
    """Serves method calls on ``target`` to local clients, each connection on its own thread.

    The accept loop only accepts: the key handshake runs on the connection's own thread under
    a deadline (``handshake_timeout_s``), so a client that stays silent, sends garbage or
    holds the wrong key never delays another connection.

    Args:
        target: Object whose methods are served; it implements ``interface``.
        address: Unix socket path, or a Linux abstract-namespace name (starting with NUL).
        authkey: Shared secret (bytes) clients must present.
        where: Description of the serving process, attached to errors sent back.
        interface: The interface (a ``Protocol`` of :mod:`tierload.wire.api`) clients may call:
            its methods are the allow-list; a call to any other name is refused with
            :class:`MethodNotAllowedError`.
        handshake_timeout_s: Seconds a new connection has to pass the key handshake.
        max_connections: Open connections at most; more are closed as soon as accepted.
    """

    def __init__(self, target: Any, address: str, authkey: bytes, where: str, interface: type, *,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> None:
        self.target = target
        self.address = address
        self.authkey = authkey
        self.where = where
        self.methods = api_methods(interface)
        self.handshake_timeout_s = handshake_timeout_s
        self.max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        if not _is_abstract(address) and os.path.exists(address):
            os.unlink(address)  # a stale socket of a dead actor on the same path
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(address)
        if not _is_abstract(address):  # bind(2) applies the umask; owner-only like the endpoint file beside it
            os.chmod(address, PRIVATE_FILE_MODE)
        self._socket.listen(_LISTEN_BACKLOG)
        self._closed = False
        self._open: set[Connection] = set()  # authenticated connections, hung up on by close()
        self._open_lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, name="tierload-channel", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._socket.accept()
            except OSError:
                if self._closed:
                    return
                continue
            if not self._slots.acquire(blocking=False):
                log.warning("%s: refused a channel connection: %d connections are open already",
                            self.where, self.max_connections)
                sock.close()
                continue
            threading.Thread(target=self._handle, args=(sock,), name="tierload-channel-conn", daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        try:
            conn = self._authenticate(sock)
            if conn is not None:
                with self._open_lock:
                    if self._closed:
                        conn.close()
                        return
                    self._open.add(conn)
                try:
                    with conn:
                        self._serve(conn)
                finally:
                    with self._open_lock:
                        self._open.discard(conn)
        finally:
            self._slots.release()

    def _authenticate(self, sock: socket.socket) -> Connection | None:
        """The connection once the client proved it holds the key, or None (hung up on)."""
        conn = Connection(os.dup(sock.fileno()))
        undecided = threading.Lock()  # whoever takes it first decides: the handshake or the deadline

        def hang_up() -> None:
            if undecided.acquire(blocking=False):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the handshake's blocked read

        timer = threading.Timer(self.handshake_timeout_s, hang_up)
        timer.daemon = True
        timer.start()
        try:
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            passed = undecided.acquire(blocking=False)
        except (OSError, EOFError, AuthenticationError) as exc:
            log.info("%s: rejected a channel connection: %s", self.where, exc or type(exc).__name__)
            passed = False
        finally:
            timer.cancel()
            sock.close()  # ``conn`` holds its own descriptor of the socket
        if not passed:
            conn.close()
            return None
        return conn

    def _serve(self, conn: Connection) -> None:
        while True:
            try:
                call = ChannelCall.received(conn.recv())
            except (EOFError, OSError):
                return
            except Exception:  # noqa: BLE001 - a message that does not unpickle ends this connection only
                log.warning("%s: dropped a channel connection that sent a malformed message", self.where,
                            exc_info=True)
                return
            reply = self._dispatch(call)
            if not call.oneway:
                try:
                    conn.send(reply)
                except (OSError, EOFError):
                    return

    def _dispatch(self, call: ChannelCall) -> tuple[bool, Any]:
        method, oneway = call.method, call.oneway
        try:
            if method not in self.methods:
                raise MethodNotAllowedError(f"{method!r} is not served over this channel; it serves "
                                            f"{', '.join(sorted(self.methods))}", where=self.where)
            return True, getattr(self.target, method)(*call.args, **call.kwargs)
        except Exception as exc:  # noqa: BLE001 - every error goes back to the caller
            error: Exception
            if isinstance(exc, TierloadError):
                exc.remote_traceback = traceback.format_exc()
                error = exc
            else:
                error = ServiceError(f"{type(exc).__name__}: {exc}", where=self.where,
                                     remote_traceback=traceback.format_exc())
            if oneway:
                log.error("one-way call %s failed in %s: %s", method, self.where, exc, exc_info=True)
            return False, error

    def close(self) -> None:
        """Stop accepting, hang up on every open connection and remove the socket file.

        Hanging up matters: a call still in progress would otherwise reach a target that is
        being closed and answer with that failure; a client that sees the connection end
        instead treats the cache as gone (reconnects, or reads blocks itself).
        """
        with self._open_lock:
            self._closed = True
            open_now = list(self._open)
        for conn in open_now:
            try:
                with socket.socket(fileno=os.dup(conn.fileno())) as view:
                    view.shutdown(socket.SHUT_RDWR)  # the peer's recv ends; this thread's recv/send fails
            except OSError:
                pass
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accept loop
        except OSError:
            pass
        try:
            self._socket.close()
        finally:
            if not _is_abstract(self.address):
                try:
                    os.unlink(self.address)
                except FileNotFoundError:
                    pass


def _is_abstract(address: str) -> bool:
    """Whether ``address`` names a socket in Linux's abstract namespace (no file behind it)."""
    return address.startswith("\0")


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

    def call(self, method: Callable[Concatenate[Any, P], R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``method`` (an interface's method, e.g. ``NodeCacheAPI.acquire``) on the server and
        return its answer.

        Raises:
            ChannelLostError: The server cannot be reached, or went away during the call.
            TierloadError: The server's own error, re-raised here with its remote traceback.
        """
        name = call_name(method)
        with self._process_lock():
            conn = self._connection()
            try:
                conn.send(ChannelCall(name, args, kwargs))
                ok, result = conn.recv()
            except (OSError, EOFError) as exc:
                self._conn = None
                raise ChannelLostError(f"the node cache at {self.address} went away during {name}: {exc}") from exc
        if not ok:
            raise result
        return result

    def notify(self, method: Callable[Concatenate[Any, P], None], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Send a one-way call of ``method`` (no answer; the server logs its errors).

        Raises:
            ChannelLostError: The server cannot be reached.
        """
        name = call_name(method)
        with self._process_lock():
            conn = self._connection()
            try:
                conn.send(ChannelCall(name, args, kwargs, oneway=True))
            except (OSError, EOFError) as exc:
                self._conn = None
                raise ChannelLostError(f"the node cache at {self.address} went away during {name}: {exc}") from exc

    def close(self) -> None:
        with self._process_lock():
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
