"""Credential providers for the B06 tests, imported by the node cache actor (tests/ is on its path).

Per process: the first call returns the expired key, later calls the fresh one (``rotating``),
or the expired key every time (``always_expired``). Calls are logged to a file so the test can
count them across processes.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

EXPIRED = "EXPIREDKEYAAAAAAAAAA"
FRESH = "FRESHKEYBBBBBBBBBBBB"
LOG = Path(tempfile.gettempdir()) / f"tierload-test-credentials-{os.getuid()}.log"
_calls = 0


def _record(key: str) -> dict:
    with open(LOG, "a") as handle:
        handle.write(json.dumps({"pid": os.getpid(), "key": key}) + "\n")
    return {"key": key, "secret": "secret"}


def rotating() -> dict:
    global _calls
    _calls += 1
    return _record(EXPIRED if _calls == 1 else FRESH)


def always_expired() -> dict:
    return _record(EXPIRED)
