"""An asyncio event loop on its own daemon thread, for coroutines started from other threads.

Started on first use in each process (never inherited through fork). Starting a coroutine
from another thread takes no lock on the way in, and many starts between two turns of the
loop cost one wake-up of the loop, not one each.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any


class LoopThread:
    """A daemon thread that runs one event loop until :meth:`stop`.

    Args:
        name: The thread's name (shown by profilers and ``py-spy``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = -1
        self._start_lock = threading.Lock()
        self._pending: deque[tuple[Callable[..., Coroutine], tuple]] = deque()
        self._wake_pending = False
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coroutine_function: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``coroutine_function(*args)`` as a task on the loop; returns at once, from any thread."""
        loop = self._running_loop()
        self._pending.append((coroutine_function, args))
        if not self._wake_pending:
            # Cleared by the loop before it drains, so a start it could miss wakes it again.
            self._wake_pending = True
            loop.call_soon_threadsafe(self._start_pending)

    def stop(self) -> None:
        """Let the running tasks finish, then end the loop and its thread (returns at once)."""
        loop = self._loop
        if loop is None or self._pid != os.getpid() or loop.is_closed():
            return

        async def finish() -> None:
            self._start_pending()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            loop.stop()

        loop.call_soon_threadsafe(lambda: loop.create_task(finish()))

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None and self._pid == os.getpid():
            return loop
        with self._start_lock:
            if self._loop is None or self._pid != os.getpid():
                self._pending.clear()  # a forked child does not run its parent's coroutines
                self._wake_pending = False
                self._tasks = set()
                new_loop = asyncio.new_event_loop()
                threading.Thread(target=self._run, args=(new_loop,), name=self.name, daemon=True).start()
                self._loop, self._pid = new_loop, os.getpid()
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _start_pending(self) -> None:
        self._wake_pending = False
        loop = asyncio.get_running_loop()
        while self._pending:
            coroutine_function, args = self._pending.popleft()
            task = loop.create_task(coroutine_function(*args))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
