"""Run a contender phase from the peers' environment, which lacks tierload's dependencies.

``python <path>/peer_entry.py NAME PHASE CONTEXT_JSON RESULT_JSON``. The contender code needs
only :mod:`tierload_tools.bench`, which imports nothing of the library (Ray, pydantic, its pinned
torch) at import time; the repository's root goes on the path so the tools import from there.
"""

import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        del sys.path[0]  # this directory holds run.py, report.py ...: do not let them shadow anything
    sys.path.insert(0, os.path.dirname(os.path.dirname(here)))  # the repository: tierload_tools/ lives there
    from tierload_tools.bench.contenders.__main__ import main

    sys.exit(main(sys.argv[1:]))
