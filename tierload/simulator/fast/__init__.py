"""The compiled simulator: policies' bookkeeping on integer block ids in arrays, stepped by numba.

:func:`tierload.simulator.run.simulate` and :func:`tierload.simulator.belady.min_hits`
select it on their own; the Python policy classes stay the reference it is tested against.

Compiled functions are cached next to their modules (``cache=True``). Numba re-checks a cached
function against its own file only, and most functions here are inlined into callers in other
modules: after an edit of one module, a caller's cache would keep the old code. So the cache
is dropped whenever any module here changes (:func:`_drop_stale_cache`, at import).
"""

import hashlib
from pathlib import Path

CACHE_STAMP = "sources.sha256"  # in __pycache__: the digest of this package's sources the cache was built from


def _drop_stale_cache(package: Path | None = None) -> bool:
    """Delete numba's cache files in ``package`` (default: this one) if any of its modules with
    compiled functions (every ``*.py`` but ``__init__.py``) changed since they were made.

    Returns:
        Whether cache files were dropped. A cache folder that cannot be written is left as it
        is (numba then caches elsewhere or not at all).
    """
    package = Path(__file__).resolve().parent if package is None else package
    digest = hashlib.sha256()
    for source in sorted(set(package.glob("*.py")) - {package / "__init__.py"}):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    cache = package / "__pycache__"
    stamp = cache / CACHE_STAMP
    try:
        if stamp.read_text(encoding="ascii") == digest.hexdigest():
            return False
    except OSError:
        pass  # no stamp yet: the cache (if any) is of unknown sources
    try:
        cache.mkdir(exist_ok=True)
        dropped = [file for pattern in ("*.nbi", "*.nbc") for file in cache.glob(pattern)]
        for file in dropped:
            file.unlink(missing_ok=True)
        stamp.write_text(digest.hexdigest(), encoding="ascii")
    except OSError:
        return False
    return bool(dropped)


_drop_stale_cache()



def warm_up() -> None:
    """Compile the replay and MIN now (or load them from the cache): a few seconds once, so
    that timings and progress bars that follow measure replays only."""
    import numpy as np

    from tierload.simulator.fast.belady import min_hits_fast
    from tierload.simulator.fast.simulate import simulate_fast
    from tierload.simulator.stack import StackSpec
    from tierload.simulator.trace import Trace

    # One trace is enough: every dtype is converted to the one compiled for (see .columns).
    trace = Trace(np.array([0, 1, 0], np.int32), np.zeros(3, np.int32), np.zeros(3, np.float32),
                  np.array([1, 1], np.int64))
    simulate_fast(trace, StackSpec("clairvoyant", 1, "lfu", 1))
    min_hits_fast(trace.block, trace.block_bytes, 1, trace.node)
