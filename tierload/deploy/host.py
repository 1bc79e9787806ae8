"""The service host: a child process that owns Ray for a training process that has none.

A training process that finds no node cache to join used to start Ray itself: ``import ray``
and a Ray driver in every process that started a dataset, 77 MB of its RSS for the rest of the
job (``benchmarks/results/2026-12-02-training-memory/README.md``) and a second of imports. So a
process that is not connected to Ray asks a host instead: :func:`find_node_cache` starts one
fresh interpreter (``python -m tierload.deploy.host_process``), which starts or joins Ray exactly
as the process itself did (:func:`~tierload.deploy.runtime.node_endpoint`: tierload's own local
Ray on loopback, or the configured cluster), starts this node's cache actor and answers its
endpoint. The training process then reads through the cache's channel alone, as a job that
joined another job's cache always has: it never imports Ray. A process already connected to Ray
(a Ray Train worker, a script that called ``ray.init()``) keeps using its own, in process.

One host per training process, for every deployment it starts (as there was one Ray per
process). It lives as long as the training process: it ends when its end of the socket pair
closes (the training process exits, or is killed, and with it every DataLoader worker that
inherited the descriptor), or on SIGTERM; either way its exit closes the node caches it started
(so each withdraws its endpoint) before Ray shuts down. It runs in a session of its own, so a
Ctrl-C in the terminal reaches the training script, which decides, and not the host; the
training process's exit hook waits for the host to end (:data:`STOP_WAIT_S`) so that nothing is
left running when the script returns.

The host answers one typed request, :class:`~tierload.wire.messages.CacheRequest` ->
:class:`~tierload.wire.messages.CacheAnswer`, pickled over a ``multiprocessing`` connection on
the socket pair; a :class:`~tierload.errors.TierloadError` raised there comes back as its own
class (errors pickle with their context). The host's own side: :mod:`tierload.deploy.host_process`.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Iterator

from tierload.config.models import TierloadConfig
from tierload.deploy.runtime import node_endpoint
from tierload.errors import ServiceError
from tierload.node.ownership import join_owner, live_owner
from tierload.ray_presence import ray_connected
from tierload.wire.messages import CacheAnswer, CacheRequest, Endpoint

log = logging.getLogger(__name__)

# Seconds the training process's exit waits for its host to close the caches and Ray, before SIGTERM.
STOP_WAIT_S = 30.0
# Seconds a host told to stop (SIGTERM) has to close them before it is killed.
KILL_WAIT_S = 10.0
# How often a caller waiting for an answer looks whether the host still runs (seconds).
POLL_S = 0.5


class ServiceHost:
    """The training process's side of one host process.

    Raises:
        ServiceError: The host could not be started.
    """

    def __init__(self, generation: int) -> None:
        self.generation = generation
        ours, theirs = socket.socketpair()
        # The host finds tierload (and whatever the caller put on its path) where the caller does.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        try:
            self.process = subprocess.Popen([sys.executable, "-m", "tierload.deploy.host_process",
                                             str(theirs.fileno())],
                                            pass_fds=(theirs.fileno(),), start_new_session=True, env=env,
                                            stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            raise ServiceError(f"cannot start tierload's service host ({sys.executable} -m "
                               f"tierload.deploy.host_process): {exc}") from exc
        finally:
            theirs.close()
        self._connection = Connection(ours.detach())
        self._lock = threading.Lock()  # one request at a time: the dataset's start, or the keeper's thread
        self._request_ids = itertools.count(1)
        # The request sent and not answered yet: (its id, its settings).
        self._asked: tuple[int, dict[str, Any]] | None = None

    @property
    def asked(self) -> bool:
        """Whether a request was sent and its answer not read yet."""
        return self._asked is not None

    @property
    def running(self) -> bool:
        """Whether the host process still runs."""
        return self.process.poll() is None

    def ask(self, config: TierloadConfig) -> None:
        """Send the request for ``config`` now, so the host starts Ray while this process does
        other work; :meth:`node_endpoint` then waits for the answer.

        Raises:
            ServiceError: The host has ended.
        """
        with self._lock:
            if self._asked is None:
                self._send(config.to_dict())

    def node_endpoint(self, config: TierloadConfig) -> Endpoint:
        """This node's cache for ``config``, found or started by the host (asked now unless
        :meth:`ask` asked already).

        Raises:
            TierInUseError: Another job with another configuration owns the hot directory.
            ServiceError: Ray or the cache actor could not be started, or the host ended
                without answering (its own output, on this process's stderr, says why).
        """
        settings = config.to_dict()
        with self._lock:
            if self._asked is not None and self._asked[1] != settings:
                self._receive()  # an early request for other settings: its cache runs, the answer is not ours
            if self._asked is None:
                self._send(settings)
            answer = self._receive()
        if answer.error is not None:
            raise answer.error
        if answer.endpoint is None:
            raise ServiceError(f"tierload's service host (pid {self.process.pid}) answered neither an endpoint nor "
                               "an error")
        return answer.endpoint

    def _send(self, settings: dict[str, Any]) -> None:
        request_id = next(self._request_ids)
        try:
            self._connection.send(CacheRequest(request_id, settings))
        except OSError as exc:
            raise self._ended() from exc
        self._asked = (request_id, settings)

    def _receive(self) -> CacheAnswer:
        """The answer to the request in flight; answers to earlier ones (whose callers were
        interrupted while they waited) are dropped."""
        if self._asked is None:
            raise ServiceError("no request to tierload's service host is in flight")
        wanted = self._asked[0]
        try:
            while True:
                while not self._connection.poll(POLL_S):
                    if not self.running:
                        raise EOFError
                answer = CacheAnswer.received(self._connection.recv())
                if answer.request_id == wanted:
                    self._asked = None
                    return answer
                log.debug("dropped the service host's answer to request %d", answer.request_id)
        except (EOFError, OSError) as exc:
            self._asked = None
            raise self._ended() from exc

    def _ended(self) -> ServiceError:
        return ServiceError(f"tierload's service host (pid {self.process.pid}) ended without answering "
                            f"(exit status {self.process.poll()}); its output above says why")

    def let_go(self) -> None:
        """Close this end of the connection: the host ends once it has answered what it is working on."""
        self._connection.close()

    def close(self, wait_s: float = STOP_WAIT_S) -> None:
        """End the host: it closes the node caches it started and shuts its Ray down.

        Waits up to ``wait_s`` seconds, then sends SIGTERM (and SIGKILL after :data:`KILL_WAIT_S`).
        """
        self.let_go()
        for stop, patience in ((None, wait_s), (self.process.terminate, KILL_WAIT_S), (self.process.kill, None)):
            if stop is not None:
                stop()
            try:
                self.process.wait(patience)
                return
            except subprocess.TimeoutExpired:
                log.warning("tierload's service host (pid %s) did not end within %.0f s", self.process.pid, patience)


_host: ServiceHost | None = None
_host_lock = threading.Lock()
_letting_go: list[ServiceHost] = []  # hosts let go (stop_host(wait=False)), waited for at exit
_exit_hook_registered = False
_generations = itertools.count(1)  # each host this process starts has its own number
# The hosts ended on purpose (stop_host, this process's exit): a keeper whose cache ran in one takes it
# for stopped, as after a ray.shutdown(), where a host that died (killed, out of memory) is a cache lost.
_ended_on_purpose: set[int] = set()
# A host that ends on SIGTERM was told to by someone (this process, a job scheduler ending the job).
_TERMINATED = (-signal.SIGTERM, 128 + signal.SIGTERM)


def host_connected() -> bool:
    """Whether this process started a service host and it still runs (never imports Ray)."""
    return _host is not None and _host.running


def host_generation() -> int | None:
    """The number of this process's running service host (each new host has a new one), or None."""
    host = _host
    return host.generation if host is not None and host.running else None


def host_ended_on_purpose(generation: int | None) -> bool:
    """Whether service host number ``generation`` was ended on purpose: :func:`stop_host`, this
    process's exit, or a SIGTERM (a job scheduler ending the job). False for None."""
    if generation is None:
        return False
    host = _host
    terminated = host is not None and host.generation == generation and host.process.poll() in _TERMINATED
    return terminated or generation in _ended_on_purpose


def has_ray() -> bool:
    """Whether this process is connected to Ray, itself or through its service host (never imports Ray)."""
    return ray_connected() or host_connected()


def find_node_cache(config: TierloadConfig, start_ray: bool = True) -> Endpoint:
    """How this process reaches its node's cache: in its own Ray when it is connected
    (:func:`~tierload.deploy.runtime.node_endpoint`), else the live owner of the hot directory
    when this job may share it, else through this process's service host (started if there is
    none, unless ``start_ray`` is False).

    Raises:
        TierInUseError: Another job with another configuration owns the hot directory.
        ServiceError: Ray or the cache actor could not be started, or ``start_ray`` is False and
            neither this process nor a host of its own is connected to Ray.
    """
    if ray_connected():
        return node_endpoint(config, start_ray=start_ray)
    host = _host
    if host is not None and host.running and host.asked:  # asked early (start_early): its answer comes first
        return host.node_endpoint(config)
    if "{node}" not in config.hot.dir:  # else the directory names a node only Ray can name: the host
        joined = join_owner(config, config.hot.dir)
        if joined is not None:
            return joined
    return _running_host(start_ray).node_endpoint(config)


def start_early(config: TierloadConfig) -> bool:
    """Start this process's service host and ask it for ``config``'s node cache now, when this
    process will need it (not connected to Ray, no host yet, and no cache to join on the hot
    directory): Ray then starts while the caller maps or builds the manifest, and
    :func:`find_node_cache` collects the answer. Whether it started a host.

    Raises:
        ServiceError: The host could not be started.
    """
    if has_ray() or ("{node}" not in config.hot.dir and live_owner(config.hot.dir) is not None):
        return False
    _running_host(start=True).ask(config)
    return True


@contextlib.contextmanager
def host_started_early(config: TierloadConfig) -> Iterator[None]:
    """:func:`start_early` for the block; a host it started is let go if the block fails, so a
    start that fails (a missing bucket, a bad layout) leaves no Ray running behind it."""
    started = start_early(config)
    try:
        yield
    except BaseException:
        if started:
            stop_host(wait=False)
        raise


def _running_host(start: bool) -> ServiceHost:
    global _host, _exit_hook_registered
    with _host_lock:
        if _host is None or not _host.running:
            if not start:
                raise ServiceError("this process has no running tierload service host (it ended with its Ray, or "
                                   "none was started); tierload does not start one by itself here: build a new "
                                   "TieredDataset to start it")
            if not _exit_hook_registered:
                # Usually registered before the keepers' exit hook, so it runs after it (LIFO); where a
                # keeper came first (the job had joined another's cache), it sees the host ended on purpose.
                atexit.register(_end_hosts)
                _exit_hook_registered = True
            if _host is not None:
                _host.let_go()  # a host that died: its socket is closed here too
            _host = ServiceHost(next(_generations))
        return _host


def stop_host(wait: bool = True) -> None:
    """End this process's service host, if it started one: the node caches it started close and
    its Ray shuts down (a dataset built afterwards starts a new one).

    Args:
        wait: Wait for it to end (:meth:`ServiceHost.close`); False: let it end by itself (it
            answers the request it is working on, finds no one listening and ends), and wait
            for it only at this process's exit.
    """
    global _host
    with _host_lock:
        host, _host = _host, None
        if host is not None:
            _ended_on_purpose.add(host.generation)
        if host is not None and not wait:
            host.let_go()
            _letting_go.append(host)
    if host is not None and wait:
        host.close()


def _end_hosts() -> None:
    stop_host()
    while _letting_go:
        _letting_go.pop().close()


def _forget_hosts_in_child() -> None:
    """In a child forked from this process (a DataLoader worker, the manifest helper): close its copy
    of the host's socket, so the host still ends when the training process does (a persistent
    worker alive at exit would otherwise keep it open), and own no host."""
    global _host
    host, _host = _host, None
    if host is not None:
        host.let_go()
    for let_go in _letting_go:
        let_go.let_go()
    _letting_go.clear()


os.register_at_fork(after_in_child=_forget_hosts_in_child)
