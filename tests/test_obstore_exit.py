"""A process that read through obstore exits cleanly, even when obstore's last answer is still
being handed to the asyncio loop as the interpreter finalizes (tierload/stores/cold/obstore_exit.py).

The race, as a core dump showed it (benchmarks/results/2026-12-03-exit-abort): a tokio thread in
``loop.call_soon_threadsafe`` writes to the loop's self-pipe with the GIL released; the awake loop
has already run the callback, the read returns, the main thread finalizes, and the tokio thread,
taking the GIL back, is ended inside Rust frames: SIGABRT, 2 times in ~1,000 reader processes.
Here the self-pipe write is made to linger, so a thread stays inside the call for as long as the
test wants, and the exit hook's wait is checked against it.
"""

from __future__ import annotations

import asyncio
import threading

from tierload.config.models import ColdConfig
from tierload.stores.cold import obstore_exit
from tierload.stores.cold.location import ColdLocation
from tierload.stores.cold.source import ColdSource


def test_a_read_through_obstore_guards_the_loop_that_awaits_it(bucket, s3):
    """The guard is on the path every obstore read takes: after one, the process's I/O loop
    (fsspec's, where reads are awaited) counts its ``call_soon_threadsafe`` calls."""
    from fsspec.asyn import get_loop

    name, fs = bucket
    fs.pipe_file(f"{name}/ds/a.bin", b"z" * 300)
    config = ColdConfig(storage_options=s3.storage_options, s3_engine="obstore")
    source = ColdSource(ColdLocation.resolve(f"s3://{name}/ds", config), config)
    obj = source.list_objects()[0]
    assert source.read(obj.url, obj.version, 0, obj.size) == b"z" * 300
    assert getattr(get_loop(), "_tierload_obstore_exit_guard", False) is True
    assert obstore_exit.settle(5.0)  # nothing left inside once the read returned and settled


def test_settle_waits_for_a_thread_inside_call_soon_threadsafe():
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        async def install() -> None:
            obstore_exit.guard_running_loop()

        asyncio.run_coroutine_threadsafe(install(), loop).result(10)
        written, release = threading.Event(), threading.Event()
        write = loop._write_to_self

        def lingering_write() -> None:
            write()
            written.set()
            release.wait(10)

        loop._write_to_self = lingering_write
        caller = threading.Thread(target=loop.call_soon_threadsafe, args=(lambda: None,))
        caller.start()
        assert written.wait(10)
        assert obstore_exit.inside() == 1 and obstore_exit.settle(0.05) is False  # still inside: waited for
        release.set()
        caller.join(10)
        assert obstore_exit.settle(5.0) is True and obstore_exit.inside() == 0
    finally:
        loop._write_to_self = write
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()


def test_a_forked_child_starts_with_nothing_inside():
    import os

    read, write = os.pipe()
    with obstore_exit._lock:  # held by this thread at the fork, as another thread's could be
        pid = os.fork()
        if pid == 0:  # the child: its lock is free and nothing is counted inside
            os.write(write, b"%d" % (obstore_exit.inside() + (0 if obstore_exit._lock.acquire(timeout=5) else 10)))
            os._exit(0)
    os.waitpid(pid, 0)
    answer = os.read(read, 8)
    os.close(read)
    os.close(write)
    assert answer == b"0"  # b"10": the lock stayed held in the child, whose every call would hang
