"""obstore's last answers delivered before the interpreter finalizes (no SIGABRT at exit).

obstore hands a finished request to the asyncio loop that awaits it from one of its Rust
(tokio) threads, through pyo3-async-runtimes: ``loop.call_soon_threadsafe(...)`` appends the
callback, then writes a byte to the loop's self-pipe with the GIL released. A loop that is
awake runs the callback before that write returns; when it was the process's last read, the
main thread can reach ``Py_FinalizeEx`` meanwhile, and the tokio thread, taking the GIL back
in a finalizing interpreter, is ended by ``pthread_exit`` inside Rust frames: the process
aborts (SIGABRT, nothing on stderr) after a run that succeeded. Seen in 3 of 1,266 short-lived
reader processes on a loaded 2-core machine, and once in a full test run; the core dump's stacks
are in ``benchmarks/results/2026-12-03-exit-abort``.

So the awaiting loop's ``call_soon_threadsafe`` is counted while it runs, and an ``atexit``
hook (atexit runs before finalization, while other threads can still take the GIL) waits until
no thread is inside it, then sleeps a moment more: a thread just past the count may still need
the GIL for the few bytecodes that return it to Rust.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

# Bounds the wait at exit: a thread stuck longer than this in a self-pipe write is not ours to fix.
EXIT_WAIT_S = 5.0
# A thread past the count returns to Rust in a few bytecodes: far less than this, on a loaded machine too.
LEAVE_S = 0.01
_GUARDED = "_tierload_obstore_exit_guard"

_lock = threading.Lock()
_inside = 0  # calls of a guarded loop's call_soon_threadsafe that have not returned
_hooked = False


def _after_fork_in_child() -> None:
    """A forked child has none of the threads that were inside the call (nor the lock's holder);
    fsspec gives it a loop of its own."""
    global _lock, _inside
    _lock, _inside = threading.Lock(), 0


os.register_at_fork(after_in_child=_after_fork_in_child)


def guard_running_loop() -> None:
    """Count the running loop's ``call_soon_threadsafe`` calls, and wait for them at exit.

    Call it in a coroutine before awaiting an obstore future: its first call on a loop wraps
    the loop's method (once; an attribute lookup afterwards).

    Raises:
        RuntimeError: No event loop is running in this thread.
    """
    loop = asyncio.get_running_loop()
    if getattr(loop, _GUARDED, False):
        return
    _wrap(loop)


def _wrap(loop: asyncio.AbstractEventLoop) -> None:
    global _hooked
    original = loop.call_soon_threadsafe

    def call_soon_threadsafe(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        global _inside
        with _lock:
            _inside += 1
        try:
            return original(callback, *args, context=context)
        finally:
            with _lock:
                _inside -= 1

    # On the instance: the loop is fsspec's (the process's one I/O loop), not a class of ours.
    setattr(loop, "call_soon_threadsafe", call_soon_threadsafe)  # noqa: B010 - an instance attribute, on purpose
    setattr(loop, _GUARDED, True)
    with _lock:
        if not _hooked:
            atexit.register(settle)
            _hooked = True


def inside() -> int:
    """Threads inside a guarded loop's ``call_soon_threadsafe`` now."""
    return _inside


def settle(timeout_s: float = EXIT_WAIT_S) -> bool:
    """Wait (sleeping, so the GIL is free) until no thread is inside a guarded loop's
    ``call_soon_threadsafe``; True if none is, False if ``timeout_s`` seconds passed first."""
    deadline = time.monotonic() + timeout_s
    while True:
        while _inside:
            if time.monotonic() >= deadline:
                log.debug("%d thread(s) still delivering obstore answers at exit", _inside)
                return False
            time.sleep(0.001)
        time.sleep(LEAVE_S)  # the GIL free for a thread that was just leaving the call
        if not _inside:
            return True
