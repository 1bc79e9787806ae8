"""Coroutines started from other threads, on the process's one I/O event loop.

That loop is fsspec's (``fsspec.asyn.get_loop()``, on its daemon thread ``fsspecIO``), the one
s3fs's client and the S3 range reads run their requests on: a cold miss fetched here awaits its
GETs directly, never handing them to a second loop and back. One loop per process, made on first
use (fsspec makes a new one in a forked child). Starting a coroutine from another thread takes no
lock on the way in, and many starts between two turns of the loop cost one wake-up, not one each.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from fsspec.asyn import get_loop


class LoopThread:
    """Starts coroutines on the process's I/O loop until :meth:`stop`.

    Args:
        name: What the coroutines are for (named in the tasks, as ``py-spy`` and asyncio's debug
            mode show them).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = -1
        self._start_lock = threading.Lock()
        self._pending: deque[tuple[Callable[..., Coroutine], tuple]] = deque()
        self._wake_pending = False
        self._tasks: set[asyncio.Task] = set()
        self._stopped = False

    def spawn(self, coroutine_function: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``coroutine_function(*args)`` as a task on the loop; returns at once, from any thread.
        Does nothing once :meth:`stop` was called."""
        if self._stopped:
            return
        loop = self._running_loop()
        self._pending.append((coroutine_function, args))
        if not self._wake_pending:
            # Cleared by the loop before it drains, so a start it could miss wakes it again.
            self._wake_pending = True
            loop.call_soon_threadsafe(self._start_pending)

    def stop(self) -> None:
        """Start what was already spawned and nothing after; the running tasks finish on the loop,
        which goes on serving the process's other clients (returns at once)."""
        loop = self._loop
        self._stopped = True
        if loop is None or self._pid != os.getpid() or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._start_pending)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and self._pid == os.getpid():
            return loop
        with self._start_lock:
            if self._loop is None or self._pid != os.getpid():
                self._pending.clear()  # a forked child does not run its parent's coroutines
                self._wake_pending = False
                self._tasks = set()
                self._loop, self._pid = get_loop(), os.getpid()
            return self._loop

    def _start_pending(self) -> None:
        self._wake_pending = False
        loop = asyncio.get_running_loop()
        while self._pending:
            coroutine_function, args = self._pending.popleft()
            task = loop.create_task(coroutine_function(*args), name=self.name)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
