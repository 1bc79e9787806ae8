"""One owner per hot tier directory: an exclusive lock held for the node cache's lifetime.

Two jobs that each ran their own node cache over one hot directory (two training processes
with their own local Ray and the same ``hot.dir``) counted the same bytes twice, evicted each
other's blocks and overwrote each other's endpoint. So the node cache that starts on a
directory takes an exclusive ``flock`` on :data:`OWNER_FILE` in it (the directory resolved with
``realpath``, so two spellings of one directory are one owner) and holds it until it closes or
its process dies; the kernel releases the lock of a dead process, so a stale owner is taken
over by the next one without any clean-up by hand. The locked file also holds the owner's
:class:`OwnerRecord` (pid, host, Ray address, the sharing terms of its configuration), which
another job reads to decide whether it may join that cache:

- **Compatible** (same :func:`sharing_terms`): the job joins the owner through its published
  endpoint (:mod:`tierload.wire.endpoint`) and its local channel: one node cache, one capacity,
  one copy of a block read by every job, every job's streams planned together.
- **Incompatible**: the job is refused with :class:`~tierload.errors.TierInUseError`, which
  names the owner, each differing setting, and how to stop the owner.

``flock`` locks are per open file and are not inherited across ``exec`` (the descriptor is
close-on-exec), so only the owning process holds the lock. Linux only (``fcntl``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from tierload.config.models import TierloadConfig
from tierload.errors import ServiceError, TierInUseError
from tierload.stores.control_dir import control_dir
from tierload.stores.dir_trust import file_mode, make_private_dirs
from tierload.wire.endpoint import read_endpoint
from tierload.wire.messages import Endpoint, Message

log = logging.getLogger(__name__)

OWNER_FILE = ".tierload-owner.lock"  # .tierload*: listings and block counts skip it
# The sections of the configuration that shape the node cache itself. Everything else (cold
# location and retries, manifest, layout, ray) belongs to a job or its datasets: each dataset
# brings its cold location when it registers, and the owner's cold retry settings serve it.
SHARED_SECTIONS = ("hot", "warm", "policy", "prefetch", "wire")
# A probe (shared lock, released at once) can collide with the owner's first try, and a cache
# actor that Ray restarts may start while its dead predecessor's process is still exiting; the
# owner tries again for this long before it concludes that another process holds the lock.
ACQUIRE_PATIENCE_S = 5.0


def real_dir(path: str) -> str:
    """``path`` with ``~`` expanded and every symbolic link resolved (the physical directory)."""
    return os.path.realpath(os.path.expanduser(path))


def _real_url(url: str | None) -> str | None:
    return real_dir(url) if url and "://" not in url else url


def sharing_terms(config: TierloadConfig, hot_dir: str) -> dict[str, Any]:
    """What two jobs must agree on to share one node cache.

    Two configurations are compatible when these are equal: the ``hot`` section (the
    directory as a physical path, its capacities, peer settings), the ``warm`` section (URL,
    local paths resolved; capacity; compression), the ``policy`` section (eviction, admission
    and decay of both tiers), ``prefetch`` (depths, concurrency, idle timeout) and ``wire``.
    A job joining a cache gets exactly the owner's behaviour, so any difference there would
    silently change what the joiner asked for; settings of a job's own datasets (cold
    location, manifest, layout, seed) and of its Ray connection may differ freely.

    Args:
        config: A job's configuration.
        hot_dir: Its hot directory on this node (``{node}`` already replaced).

    Returns:
        JSON-ready ``{section: {field: value}}``.
    """
    dumped = config.model_dump(mode="json")
    terms = {section: dumped[section] for section in SHARED_SECTIONS}
    terms["hot"]["dir"] = real_dir(hot_dir)
    terms["warm"]["url"] = _real_url(config.warm.url)
    return terms


def differences(owner: dict[str, Any], mine: dict[str, Any], prefix: str = "") -> list[str]:
    """``"section.field: owner X, this job Y"`` for each setting that differs (sorted)."""
    lines = []
    for name in sorted(set(owner) | set(mine)):
        theirs, ours = owner.get(name), mine.get(name)
        if isinstance(theirs, dict) and isinstance(ours, dict):
            lines += differences(theirs, ours, f"{prefix}{name}.")
        elif theirs != ours:
            lines.append(f"{prefix}{name}: owner {theirs!r}, this job {ours!r}")
    return lines


@dataclass(frozen=True)
class OwnerRecord(Message):
    """Who owns a hot directory, as written into its lock file.

    Attributes:
        pid: The owning process (a node cache actor, or a process running one itself).
        host: Its host name.
        node_id: Its node cache's node id.
        started_at: When it took ownership (Unix time, seconds).
        terms: Its :func:`sharing_terms`.
        ray_address: The Ray cluster it runs in (for ``tierload stop``), if known.
        version: Shape of this record.
    """

    pid: int
    host: str
    node_id: str
    started_at: float
    terms: dict[str, Any] = field(repr=False)
    ray_address: str | None = None
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "pid": self.pid, "host": self.host, "node_id": self.node_id,
                "started_at": self.started_at, "terms": self.terms, "ray_address": self.ray_address}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OwnerRecord:
        """Inverse of :meth:`to_json`.

        Raises:
            MessageError: Another tierload release wrote it.
            KeyError, ValueError, TypeError: It is not an owner record.
        """
        record = cls(int(data["pid"]), str(data["host"]), str(data["node_id"]), float(data["started_at"]),
                     dict(data["terms"]), data.get("ray_address"), int(data.get("version", 0)))
        return cls.received(record)

    def how_to_stop(self) -> str:
        where = f" in the Ray cluster at {self.ray_address}" if self.ray_address else ""
        return (f"end the job that owns it (the node cache is process {self.pid} on {self.host}{where}), or run "
                "`tierload stop` with that job's configuration against its Ray cluster")


def _lock_path(hot_dir: str) -> str:
    return os.path.join(control_dir(hot_dir), OWNER_FILE)  # the hot directory unless it is read-only


def _read_record(handle) -> OwnerRecord | None:
    handle.seek(0)
    try:
        return OwnerRecord.from_json(json.loads(handle.read() or "null"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class TierOwnership:
    """The lock that makes this process the one owner of a hot directory.

    Args:
        hot_dir: The hot directory (created if missing, owner-only unless ``shared``).
        record: What to publish about this owner.
        shared: The hot directory is shared on purpose (``hot.shared``): created with the umask.
    """

    def __init__(self, hot_dir: str, record: OwnerRecord, *, shared: bool = False) -> None:
        self.path = _lock_path(hot_dir)
        self.record = record
        self.shared = shared
        self._fd: int | None = None

    def acquire(self) -> OwnerRecord | None:
        """Take the lock and publish :attr:`record`.

        Returns:
            The record of a previous owner that is gone (its lock was released: the process
            died or closed), or None when there was none.

        Raises:
            TierInUseError: A live process owns the directory.
        """
        make_private_dirs(os.path.dirname(self.path), shared=self.shared)
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, file_mode(self.shared)))
        # The lock is held through a read-only descriptor: a file open for writing for the cache's
        # whole life would stop the file system from being remounted read-only (EBUSY).
        fd = os.open(self.path, os.O_RDONLY)
        deadline = time.monotonic() + ACQUIRE_PATIENCE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                with os.fdopen(fd, "r") as handle:
                    owner = _read_record(handle)
                raise refusal(owner, self.record.terms, self.path) from None
        with os.fdopen(os.dup(fd), "r") as handle:
            previous = _read_record(handle)
        self._fd = fd
        self.publish(self.record)
        if previous is not None:
            log.warning("took over the hot directory %s from its previous owner (pid %s on %s, started %s), "
                        "which is gone", os.path.dirname(self.path), previous.pid, previous.host,
                        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(previous.started_at)))
        return previous

    def publish(self, record: OwnerRecord) -> None:
        """Write ``record`` into the held lock file (e.g. after the policy changed at run time)."""
        if self._fd is None:
            return
        self.record = record
        try:
            with open(self.path, "r+") as handle:
                handle.truncate()
                json.dump(record.to_json(), handle)
        except OSError as exc:  # a hot directory turned read-only: the lock still holds, joiners see the old record
            log.warning("cannot update the owner record in %s: %s", self.path, exc)

    def release(self) -> None:
        """Give up ownership (the record is emptied, so nobody joins a closed cache)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.truncate(self.path, 0)
        except OSError as exc:  # read-only now: a stale record beside a released lock is not an owner
            log.debug("cannot empty the owner record %s: %s", self.path, exc)
        finally:
            os.close(fd)  # closing the last descriptor of the open file releases the flock


def live_owner(hot_dir: str) -> OwnerRecord | None:
    """The record of the live owner of ``hot_dir``, or None if nobody holds its lock.

    A probe takes a shared lock and releases it at once; a live owner's exclusive lock makes
    it fail. A record still being written is read again for up to a second.
    """
    try:
        fd = os.open(_lock_path(hot_dir), os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "r") as handle:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            deadline = time.monotonic() + 1.0
            while (record := _read_record(handle)) is None and time.monotonic() < deadline:
                time.sleep(0.05)
            return record or OwnerRecord(-1, "unknown", "unknown", 0.0, {})
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None


def refusal(owner: OwnerRecord | None, mine: dict[str, Any], path: str) -> TierInUseError:
    """The error for a job whose configuration does not let it share ``owner``'s directory."""
    directory = os.path.dirname(path)
    if owner is None or owner.pid < 0:
        return TierInUseError(f"the hot directory {directory} is locked by another process that did not say who "
                              f"it is (see `fuser {path}`); stop it, or give this job another hot.dir", tier="hot")
    who = f"pid {owner.pid} on {owner.host}, node {owner.node_id[:16]}"
    diff = differences(owner.terms, mine)
    if not diff:
        return TierInUseError(
            f"the hot directory {directory} is owned by a live node cache with the same configuration ({who}); "
            "join it through its endpoint (TieredDataset does) instead of starting a second cache, or "
            f"{owner.how_to_stop()}", tier="hot")
    return TierInUseError(
        f"the hot directory {directory} is owned by a node cache with another configuration ({who}); "
        f"differences: {'; '.join(diff)}. To share its cache, use its settings; otherwise give this job another "
        f"hot.dir, or {owner.how_to_stop()}", tier="hot")


def check_compatible(owner: OwnerRecord, config: TierloadConfig, hot_dir: str) -> None:
    """Refuse to join ``owner`` unless ``config`` has the same :func:`sharing_terms`.

    Raises:
        TierInUseError: They differ (the message lists every difference and names the owner).
    """
    mine = sharing_terms(config, hot_dir)
    if owner.terms != mine or owner.pid < 0:
        raise refusal(owner, mine, _lock_path(hot_dir))


def owner_record(config: TierloadConfig, hot_dir: str, node_id: str, ray_address: str | None) -> OwnerRecord:
    """This process's record as the owner of ``hot_dir``."""
    return OwnerRecord(os.getpid(), socket.gethostname(), node_id, time.time(), sharing_terms(config, hot_dir),
                       ray_address)


def join_owner(config: TierloadConfig, hot_dir: str, wait_s: float = 60.0) -> Endpoint | None:
    """Where to reach the live owner of ``hot_dir`` if this job may share it.

    Args:
        config: This job's configuration.
        hot_dir: Its hot directory on this node (``{node}`` already replaced).
        wait_s: How long to wait for an owner that is still starting to publish its endpoint.

    Returns:
        The owner's published endpoint, or None when nobody owns the directory (this job
        starts the node cache itself).

    Raises:
        TierInUseError: A live owner has another configuration (:func:`check_compatible`).
        ServiceError: The owner did not publish its endpoint within ``wait_s``.
    """
    owner = live_owner(hot_dir)
    if owner is None:
        return None
    check_compatible(owner, config, hot_dir)
    deadline = time.monotonic() + wait_s
    while True:
        endpoint = read_endpoint(real_dir(hot_dir))
        if endpoint is not None and endpoint.pid == owner.pid:
            log.info("joining the node cache that owns %s (pid %s on %s)", real_dir(hot_dir), owner.pid, owner.host)
            return endpoint
        current = live_owner(hot_dir)
        if current is None or current.pid != owner.pid:
            return join_owner(config, hot_dir, max(0.0, deadline - time.monotonic()))
        if time.monotonic() >= deadline:
            raise ServiceError(f"the node cache that owns {real_dir(hot_dir)} (pid {owner.pid}) did not publish its "
                               f"endpoint within {wait_s:g}s", tier="hot")
        time.sleep(0.1)
