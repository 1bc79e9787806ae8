"""Whether the compiled replay is built: numba's on-disk cache holds it for this machine.

Compiling the replay takes about a CPU-minute (the policies are inlined into one loop, see
:mod:`.jit`); loading it from the cache a fraction of a second. The command line asks here
first, to decide between compiling now, replaying a small trace with the reference engine
(the same decision at every access) while the compiled one builds in the background, and
using it (:mod:`tierload.cli.replay_engine`). Nothing here compiles or loads machine code.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger(__name__)


def _kernels() -> list[Any]:
    """The dispatchers whose compiled code the replay and Belady's MIN run (the rest is inlined)."""
    from tierload.simulator.fast.belady_kernel import min_hits_one_tier
    from tierload.simulator.fast.nextuse import _next_use
    from tierload.simulator.fast.replay import replay

    return [_next_use, min_hits_one_tier, replay]


def _cached(dispatcher: Any) -> bool:
    """Whether numba's cache index of ``dispatcher`` has an entry for this machine and its source.

    Reads numba's index the way ``Cache.load_overload`` does (numba's private API, checked by
    tests/test_simulate_first_run.py); any surprise counts as not cached.
    """
    try:
        cache = dispatcher._cache
        index = cache._cache_file._load_index()
        wanted = cache._index_key((), dispatcher.targetctx.codegen())[1:]  # this machine, this source
        return any(key[1:] == wanted for key in index)
    except Exception:  # noqa: BLE001 - a numba that keeps its cache otherwise: say "not built"
        log.debug("cannot read numba's cache index of %r", dispatcher, exc_info=True)
        return False


def is_compiled() -> bool:
    """Whether every compiled function of the replay loads from numba's cache (nothing to compile)."""
    return all(_cached(kernel) for kernel in _kernels())


def compile_steps() -> list[tuple[str, Callable[[], None]]]:
    """The replay's compile in steps (name, call), smallest first, for a progress bar; together
    they do what :func:`tierload.simulator.fast.warm_up` does."""
    import numpy as np

    from tierload.simulator.fast.belady import min_hits_fast
    from tierload.simulator.fast.nextuse import next_use
    from tierload.simulator.fast.simulate import simulate_fast
    from tierload.simulator.stack import StackSpec
    from tierload.simulator.trace import Trace

    # One tiny trace is enough: every dtype is converted to the one compiled for (see .columns).
    trace = Trace(np.array([0, 1, 0], np.int32), np.zeros(3, np.int32), np.zeros(3, np.float32),
                  np.array([1, 1], np.int64))
    def next_uses() -> None:
        next_use(trace.block, trace.node, 2)

    def belady() -> None:
        min_hits_fast(trace.block, trace.block_bytes, 1, trace.node)

    def the_replay() -> None:
        simulate_fast(trace, StackSpec("clairvoyant", 1, "lfu", 1))

    return [("next uses", next_uses), ("Belady's MIN", belady), ("the replay", the_replay)]
