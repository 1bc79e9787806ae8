"""The compiled simulator: policies' bookkeeping on integer block ids in arrays, stepped by numba.

:func:`tierload.simulator.run.simulate` and :func:`tierload.simulator.belady.min_hits`
select it on their own; the Python policy classes stay the reference it is tested against.

Compiled functions are cached next to their modules (``cache=True``). Numba re-checks a cached
function against its own file only: after editing a module here, delete this folder's
``__pycache__/*.nbi`` and ``*.nbc``, or callers in other modules keep the old code.
"""

from tierload.simulator.fast.belady import min_hits_fast
from tierload.simulator.fast.simulate import simulate_fast, supports

__all__ = ["min_hits_fast", "simulate_fast", "supports"]
