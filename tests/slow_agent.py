"""A Ray dashboard agent that starts slowly, once: the fault of ray-project/ray#65983.

Installed by tests/sitecustomize.py when ``TIERLOAD_TEST_SLOW_AGENT_FLAG`` names a file that does
not exist yet. The first dashboard agent to start creates it and sleeps past the raylet's fixed
15 s wait for the agent's port file, as an agent whose imports crawl on a loaded machine does; the
raylet then exits and ``ray.init`` times out. Every later agent starts as usual.
"""

from __future__ import annotations

import os
import sys
import time

SLOW_START_S = 20.0


def install(flag: str) -> None:
    if not any(arg.endswith(os.path.join("dashboard", "agent.py")) for arg in sys.argv[:1]):
        return
    try:
        descriptor = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.write(descriptor, str(os.getpid()).encode())  # the test checks that this agent ends
    os.close(descriptor)
    time.sleep(SLOW_START_S)
