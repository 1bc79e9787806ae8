"""The processes a command starts end with it: when it returns, fails, or is interrupted (SIGINT, SIGTERM).

One owner per process, installed by the command line's entry point (:func:`tierload.cli.main.main`)
before any command runs, so every command gets it without code of its own:

- SIGTERM becomes ``SystemExit(143)`` in the main thread, as Ctrl-C becomes ``KeyboardInterrupt``:
  ``finally`` blocks and context managers (the local S3 server's, ``ray.shutdown()`` in a
  ``finally``) run on either signal. ``ray.init`` that starts a local Ray replaces this handler with
  its own, which ends Ray's processes and exits the same way.
- A thread records every descendant of the process (pid and start time) every
  :data:`SCAN_INTERVAL_S` seconds, so a grandchild whose parent has already exited (an orphan,
  adopted by init; a contender's Ray workers or DataLoader workers) is still known to be ours.
  The start time makes sure a pid the system has given to another process is never signalled.
- At exit (``atexit``, registered before Ray's own exit hook, so it runs after Ray has shut down
  what it started) every recorded descendant still alive is sent SIGTERM, and SIGKILL after
  ``grace_s`` seconds. A process the command hands off on purpose (:meth:`ChildProcesses.keep_on_success`,
  e.g. the simulator's background build of its compiled replay) is left to finish when the
  command succeeded, and ended like the others when it failed or was interrupted.

A process killed with SIGKILL cannot run any of this; the local S3 servers also end when their
stdin closes (:mod:`tierload_tools.s3local`), and Ray's own servers die with their parent
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
from typing import Any

from tierload.process_ending import end_processes

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 0.5
SIGTERM_EXIT_CODE = 128 + signal.SIGTERM  # the shell's code for a command ended by SIGTERM

_owner: ChildProcesses | None = None


def _on_sigterm(_signum: int, _frame: Any) -> None:
    raise SystemExit(SIGTERM_EXIT_CODE)


class ChildProcesses:
    """The descendants of this process, recorded while it runs and ended when it exits.

    Args:
        grace_s: Seconds between SIGTERM and SIGKILL for descendants still alive at exit.
        interval_s: Seconds between two scans of the process tree.

    Use :func:`own_children` (one owner per process) rather than this class directly.
    """

    def __init__(self, grace_s: float = 5.0, interval_s: float = SCAN_INTERVAL_S) -> None:
        self.grace_s = grace_s
        self.interval_s = interval_s
        self.succeeded = False  # set by the entry point when the command returned normally
        self._seen: dict[int, float] = {}  # pid -> start time (psutil's create_time)
        self._kept: set[tuple[int, float]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tierload-child-processes", daemon=True)

    def start(self) -> ChildProcesses:
        """Start recording; end the descendants at exit; turn SIGTERM into ``SystemExit(143)``."""
        atexit.register(self.end)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _on_sigterm)
        self._thread.start()
        return self

    def record(self) -> dict[int, float]:
        """Scan the tree now; returns every descendant recorded so far (pid -> start time)."""
        import psutil

        try:
            children = psutil.Process().children(recursive=True)
        except psutil.Error:
            children = []
        with self._lock:
            for child in children:
                try:
                    self._seen.setdefault(child.pid, child.create_time())
                except psutil.Error:
                    continue
            return dict(self._seen)

    def keep_on_success(self, pid: int) -> None:
        """Leave process ``pid`` (a child of this process) running at exit if the command succeeded."""
        import psutil

        try:
            self._kept.add((pid, psutil.Process(pid).create_time()))
        except psutil.Error:
            return
        self.record()

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.record()

    def end(self) -> list[int]:
        """End every recorded descendant still alive (SIGTERM, then SIGKILL after ``grace_s``).

        Returns:
            The pids that were signalled.
        """
        import psutil

        self._stop.set()
        recorded = self.record()
        alive = []
        for pid, started in recorded.items():
            if self.succeeded and (pid, started) in self._kept:
                continue
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == started:
                    alive.append(proc)
            except psutil.Error:
                continue  # gone already, or the pid is another process's now
        if not alive:
            return []
        log.info("ending %d process(es) this command started: %s", len(alive), [p.pid for p in alive])
        end_processes(alive, self.grace_s)
        return [proc.pid for proc in alive]


def own_children() -> ChildProcesses:
    """This process's owner of its child processes, started on first use (see the module's docstring)."""
    global _owner
    if _owner is None:
        _owner = ChildProcesses().start()
    return _owner


def owner() -> ChildProcesses | None:
    """The owner if one was started in this process (a library call outside the CLI has none)."""
    return _owner
