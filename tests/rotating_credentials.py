"""Credential providers for the B06 tests, imported by the node cache actor (tests/ is on its path).

Per process: the first call returns the expired key, later calls the fresh one (``rotating``),
or the expired key every time (``always_expired``). Calls are logged to a file so the test can
count them across processes: :func:`log_path`, in the test session's own temporary directory
(``conftest._test_logs`` sets :data:`LOG_VARIABLE` before Ray starts, so actors inherit it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

EXPIRED = "EXPIREDKEYAAAAAAAAAA"
FRESH = "FRESHKEYBBBBBBBBBBBB"
LOG_VARIABLE = "TIERLOAD_TEST_CREDENTIALS_LOG"
_calls = 0


def log_path() -> Path:
    """Where this test session's provider calls are logged (set by ``conftest.ray_session``)."""
    return Path(os.environ[LOG_VARIABLE])


def _record(key: str) -> dict:
    with open(log_path(), "a") as handle:
        handle.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "key": key}) + "\n")
    return {"key": key, "secret": "secret"}


def rotating() -> dict:
    global _calls
    _calls += 1
    return _record(EXPIRED if _calls == 1 else FRESH)


def always_expired() -> dict:
    return _record(EXPIRED)
