"""The manifest built in a forked helper process: the listing never enters the process that asks.

At a million keys the listing's columns, the plan's temporaries and the writer's buffers are
hundreds of MB at their peak, and a process's heap rarely gives all of it back. A training
process pays that in every rank for the rest of the job, although it only ever needs the
finished manifest, which it maps read-only (:func:`tierload.data.manifest.open_manifest`). So
:func:`load_manifest_apart` lists, plans and writes the Arrow IPC file in a short-lived child
process, and maps the file the child hands back. In a process without Ray, a service host starts
Ray and the node cache meanwhile (:mod:`tierload.deploy.host`): the two overlap in time, in
separate processes, and neither peak stays in this one. A cached manifest is mapped at once, without a child.

Why fork: the child is ``os.fork()`` of the caller, so it starts with pyarrow, s3fs and tierload
already imported, in milliseconds. A fresh interpreter (``python -m``, the first version) spent
0.9 CPU-s and 1.2-1.4 s wall importing them again before every fresh listing
(``benchmarks/results/2026-12-01-issue25-startup/README.md``). What forking asks for:

* The child touches nothing of the caller's threads: where Ray is initialised in the caller
  (a Ray Train worker, a test session) its core worker's threads and sockets are inherited but
  never used, as by the DataLoader workers torch forks from the same process. A platform
  without ``os.fork``, or a process that has used obstore when the source is read only through it
  (its Rust runtime's threads a child would lack), builds the manifest in the caller; the reason
  is logged at debug (:func:`fork_refused`).
* Nothing of the caller's clients: the job crosses as pickled bytes even though the child could
  read it from memory, so the child's :class:`~tierload.stores.cold.source.ColdSource` makes its
  own fsspec client (fsspec resets its event loop, its IO thread and its instance cache after a
  fork). The child never uses torch (a file listing does not import it).
* Logging: the caller's handlers are inherited (``logging`` re-creates their locks after a fork);
  the child's file descriptor 2 is a temporary file, so what it writes to stderr is read back only
  when it dies without answering, as the message of the :class:`~tierload.errors.ManifestError`.

The child answers with one pickled :class:`ManifestAnswer` on a pipe; a
:class:`~tierload.errors.TierloadError` it raises comes back as its own class (errors pickle with
their context), marked with ``where``. The child ends with the call: an interrupt (Ctrl-C,
SIGTERM turned into an exception) or the timeout in the caller ends it (SIGTERM, then SIGKILL),
the caller's death ends it too (Linux), and its partial file is removed: the writer writes
under a temporary name and renames (:func:`tierload.data.manifest.partial_path`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tierload.config.models import ManifestConfig
from tierload.data.manifest import Manifest, cache_path, open_manifest, partial_path
from tierload.data.manifest_columns import index_fits, index_path
from tierload.errors import ManifestError, TierloadError
from tierload.process_memory import release_freed_memory
from tierload.stores.cold.obstore_stores import made_clients_here
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

# The version of ManifestJob / ManifestAnswer: a child of another tierload refuses the job.
# 2: ManifestJob.index_only
HELPER_VERSION = 2
# The child's stderr kept for an error message when it dies without an answer (bytes).
STDERR_TAIL = 3000
# Seconds a child told to stop (SIGTERM) has to clean up before it is killed.
STOP_GRACE_S = 2.0
# The child's exit code when it fails before it can answer (EX_SOFTWARE).
EXIT_NO_ANSWER = 70
# The child's process name (Linux ``comm``, at most 15 bytes): a forked child shares its caller's command line.
PROCESS_NAME = "tierload-manif"


@dataclass(frozen=True)
class ManifestJob:
    """What the helper builds: the manifest file of ``(source, config, layout)``, always listed
    anew (the caller maps a readable cached file itself); with ``index_only``, only the column
    index of the cached file (one written before indexes existed: nothing is listed)."""

    source: ColdSource
    config: ManifestConfig
    layout: str | None
    index_only: bool = False
    version: int = HELPER_VERSION


@dataclass(frozen=True)
class ManifestAnswer:
    """The helper's answer.

    Attributes:
        path: The manifest file it wrote (or found), or None when ``error`` is set.
        error: What it raised, when it failed.
        pid: The helper's process id.
        peak_rss_bytes: The helper's peak RSS (``VmHWM``, counting the pages it shares with the
            caller since the fork), bytes; 0 where unknown.
    """

    path: str | None
    error: BaseException | None
    pid: int
    peak_rss_bytes: int
    version: int = HELPER_VERSION


def load_manifest_apart(source: ColdSource, config: ManifestConfig, layout: str | None = None,
                        refresh: bool = False, timeout_s: float | None = None) -> tuple[Manifest, Path]:
    """The dataset's manifest, mapped from its cached file; listed and written by a forked helper
    process when there is no readable cached file (or ``refresh``), or in this process when it
    cannot fork (:func:`fork_refused`).

    Args:
        source: The cold tier under the dataset prefix.
        config: Manifest settings (``cache_dir``: where the file is written).
        layout: Layout override (see :func:`tierload.data.manifest_build.build_manifest`).
        refresh: List again even when a cached manifest exists.
        timeout_s: Seconds to wait for the helper (None: as long as the listing takes).

    Returns:
        ``(manifest, path)``: the mapped manifest and its file.

    Raises:
        ConfigError: Unknown layout.
        ManifestError: Nothing to read, or the helper ended without an answer (its exit code and
            stderr in the message) or ran past ``timeout_s``.
        BackendError: The listing failed (unreachable endpoint, missing bucket ...).
    """
    path = cache_path(source, config, layout)
    if not refresh and path.is_file():
        if not index_fits(path) and fork_refused(source) is None:
            _index_apart(ManifestJob(source, config, layout, index_only=True), timeout_s)
        try:
            return open_manifest(path), path
        except (OSError, ValueError, KeyError) as exc:  # ManifestError is a ValueError
            log.warning("cached manifest %s is unreadable (%s); listing again", path, exc)
    refused = fork_refused(source)
    if refused is not None:
        log.debug("manifest of %s built in this process, not in a forked helper: %s", source.url, refused)
        _build_and_save(source, config, layout, path)
        return open_manifest(path), path
    answer = run_helper(ManifestJob(source, config, layout), timeout_s)
    log.info("manifest of %s written by helper pid %d (peak RSS %.0f MB): %s", source.url, answer.pid,
             answer.peak_rss_bytes / 1e6, answer.path)
    assert answer.path is not None, "an answer without an error names its file"
    return open_manifest(answer.path), Path(answer.path)


def _index_apart(job: ManifestJob, timeout_s: float | None) -> None:
    """Have a forked helper write the column index of a manifest cached without one (an older
    tierload's file), so this process maps it without pyarrow. A failure is logged: the file is
    then read with pyarrow, or listed again when it is not a manifest."""
    try:
        answer = run_helper(job, timeout_s)
    except TierloadError as exc:
        log.warning("the column index of the cached manifest of %s was not written (%s); it is read with pyarrow",
                    job.source.url, exc)
        return
    log.info("column index of the cached manifest %s written by helper pid %d", answer.path, answer.pid)


def fork_refused(source: ColdSource) -> str | None:
    """Why this process must not fork a helper that lists and plans ``source`` (None: it may)."""
    if not hasattr(os, "fork"):
        return "this platform has no os.fork"
    if made_clients_here() and source.backend.needs_obstore(source):
        # Its Rust runtime's threads are not in a forked child: a child's listing through it (GCS,
        # Azure, HTTP) waited forever (tests/test_stores.py, once this process had read through it).
        # A child that lists S3 with s3fs (and reads it, if at all, with aiobotocore) never touches it.
        return (f"{source.url} is read through obstore, which this process has used (its runtime's threads "
                "do not survive a fork)")
    return None


def run_helper(job: ManifestJob, timeout_s: float | None = None) -> ManifestAnswer:
    """Run ``job`` in a forked child process and return its answer (re-raising the child's error).

    Raises:
        TierloadError: What the child raised (its own class, ``where`` naming the helper).
        ManifestError: The child ended without an answer, or ran past ``timeout_s``, or this
            process must not fork (:func:`fork_refused`).
    """
    refused = fork_refused(job.source)
    if refused is not None:
        raise ManifestError(f"the manifest helper cannot be forked: {refused}; build the manifest in this "
                            "process (load_manifest_apart does)", url=job.source.url)
    payload = pickle.dumps(job)  # the child unpickles it: no client, loop or lock of this process crosses
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    parent = os.getpid()
    with tempfile.TemporaryFile(prefix="tierload-manifest-helper-") as stderr_file:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            _child(payload, read_fd, write_fd, stderr_file.fileno(), parent)
        os.close(write_fd)
        status = None
        try:
            data = _read_until_eof(read_fd, deadline, job, timeout_s)
            status = os.waitpid(pid, 0)[1]
        finally:
            os.close(read_fd)
            if status is None:  # interrupted, timed out: the child ends with the call, and its partial file
                _stop(pid)
                path = cache_path(job.source, job.config, job.layout)
                for partial in (partial_path(path, pid), partial_path(index_path(path), pid)):
                    with contextlib.suppress(FileNotFoundError):
                        partial.unlink()
        try:
            answer = pickle.loads(data)
        except Exception:  # noqa: BLE001 - anything unreadable means the child died before answering
            answer = None
        if not isinstance(answer, ManifestAnswer) or answer.version != HELPER_VERSION:
            stderr_file.seek(0, os.SEEK_END)
            stderr_file.seek(max(0, stderr_file.tell() - STDERR_TAIL))
            tail = stderr_file.read().decode(errors="replace")
            raise ManifestError(f"the manifest helper (pid {pid}, forked) ended with exit code "
                                f"{os.waitstatus_to_exitcode(status)} and no answer; its stderr: {tail!r}",
                                url=job.source.url)
    if answer.error is not None:
        raise answer.error
    return answer


def _read_until_eof(fd: int, deadline: float | None, job: ManifestJob, timeout_s: float | None) -> bytes:
    chunks: list[bytes] = []
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise ManifestError(f"the manifest helper ran past timeout_s={timeout_s} listing {job.source.url}; "
                                    "give it more time (a million keys take about a minute)", url=job.source.url)
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _stop(pid: int) -> None:
    """End the child: SIGTERM (it cleans up), SIGKILL after :data:`STOP_GRACE_S`; reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return
        time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _child(payload: bytes, read_fd: int, write_fd: int, stderr_fd: int, parent: int) -> NoReturn:
    """The forked child: serve the job, write the answer, and leave with ``os._exit`` (never
    returning into the caller's stack, never running its ``atexit`` handlers or flushing its
    buffers a second time)."""
    code = EXIT_NO_ANSWER
    try:
        os.close(read_fd)
        os.dup2(stderr_fd, 2)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives until os._exit
        signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever handlers the caller set
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        _end_with_parent(parent)
        answer = _serve(pickle.loads(payload))
        with os.fdopen(write_fd, "wb") as answers:
            answers.write(pickle.dumps(answer))
        code = 0 if answer.error is None else 1
    except BaseException:  # noqa: BLE001 - the caller reads it from stderr as the reason for no answer
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(code)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: the listing's spill directory is removed on the way


def _end_with_parent(parent: int) -> None:
    """Linux: SIGTERM this process when the caller dies (even by SIGKILL), and name it
    :data:`PROCESS_NAME` (``ps``, ``top``; its command line is the caller's); elsewhere, nothing."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig, pr_set_name = 1, 15
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        libc.prctl(pr_set_name, ctypes.c_char_p(PROCESS_NAME.encode()))
    if os.getppid() != parent:  # died before prctl took hold
        raise SystemExit("the caller of the manifest helper is gone")


def _peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _serve(job: ManifestJob) -> ManifestAnswer:
    """The child's side: build the file, and say where it is or what went wrong."""
    where = f"manifest helper (pid {os.getpid()}, forked)"
    if job.version != HELPER_VERSION:
        error: BaseException = ManifestError(f"a manifest job of version {job.version}, this helper reads "
                                             f"{HELPER_VERSION}: the caller and the helper are different tierloads")
        return ManifestAnswer(None, error, os.getpid(), _peak_rss_bytes())
    path = cache_path(job.source, job.config, job.layout)
    try:
        if job.index_only:
            _index(path)
        else:
            _build_and_save(job.source, job.config, job.layout, path)
    except TierloadError as exc:
        exc.where = exc.where or where
        exc.remote_traceback = exc.remote_traceback or traceback.format_exc()
        return ManifestAnswer(None, exc, os.getpid(), _peak_rss_bytes())
    except Exception as exc:  # noqa: BLE001 - crosses the boundary as a typed error with its traceback
        wrapped = ManifestError(f"{type(exc).__name__}: {exc}", url=job.source.url, where=where,
                                remote_traceback=traceback.format_exc())
        return ManifestAnswer(None, wrapped, os.getpid(), _peak_rss_bytes())
    return ManifestAnswer(str(path), None, os.getpid(), _peak_rss_bytes())


def _build_and_save(source: ColdSource, config: ManifestConfig, layout: str | None, path: Path) -> None:
    """List ``source`` and write its manifest file (and the file's column index) at ``path``."""
    # Imported here, in the forked child: the listing and the writer load pyarrow, which the
    # training process that forked it never needs (it maps the file through its column index).
    from tierload.data.manifest_arrow import save_manifest
    from tierload.data.manifest_build import build_manifest

    manifest = build_manifest(source, config, layout)
    release_freed_memory()  # the listing and the plan's temporaries, before the writer's buffers
    save_manifest(manifest, path)


def _index(path: Path) -> None:
    """Write the column index of the manifest file at ``path``."""
    from tierload.data.manifest_arrow import index_manifest  # loads pyarrow: see _build_and_save

    if not index_manifest(path):
        raise ManifestError(f"{str(path)!r} cannot be indexed: a column lies outside the file, or it was "
                            "replaced while it was read")
