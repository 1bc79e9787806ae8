"""Run a contender phase from the peers' environment, which lacks tierload's dependencies.

``python <path>/peer_entry.py NAME PHASE CONTEXT_JSON RESULT_JSON``. Importing ``tierload``
would import the whole library (Ray, pydantic, its pinned torch); the contender code needs only
:mod:`tierload_tools.bench`. So this script registers an empty ``tierload`` package whose path is the
real package directory, and imports the contender runner under it.
"""

import os
import sys
import types

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        del sys.path[0]  # this directory holds run.py, report.py ...: do not let them shadow anything
    package = types.ModuleType("tierload")
    package.__path__ = [os.path.dirname(here)]
    sys.modules["tierload"] = package
    from tierload_tools.bench.contenders.__main__ import main

    sys.exit(main(sys.argv[1:]))
