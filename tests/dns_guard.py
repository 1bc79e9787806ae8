"""A name-resolution guard: no process of the test session may resolve a name ending in amazonaws.com.

Case B07 asks that "a socket guard or fake DNS shows no request to amazonaws.com". Every
HTTP client tierload uses (botocore's urllib3, aiobotocore's aiohttp with its default threaded
resolver) resolves a host name through ``socket.getaddrinfo`` before it connects, so wrapping
the ``socket`` module's resolvers stops a stray request before it leaves the process; the
client still talks to moto over real HTTP on 127.0.0.1 (an IP address, resolved as before).

:func:`install` puts the guard in the calling process (a fork inherits it). A fresh interpreter
gets it from ``tests/sitecustomize.py`` when ``TIERLOAD_TEST_DNS_GUARD_LOG`` is set and
``tests/`` is on ``PYTHONPATH`` (``conftest.ray_session`` sets both before ``ray.init``, so
every Ray worker, the node cache actors included, and every spawned DataLoader worker has it).
Each install and each refusal is appended to that log as a JSON line, so a refusal that a
client swallows or retries still shows.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Callable

FORBIDDEN_SUFFIX = "amazonaws.com"
LOG_VARIABLE = "TIERLOAD_TEST_DNS_GUARD_LOG"
_RESOLVERS = ("getaddrinfo", "gethostbyname", "gethostbyname_ex")


def _record(log: str, event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "pid": os.getpid(), "ppid": os.getppid(), **fields}) + "\n"
    with open(log, "a", encoding="utf-8") as handle:  # one short append per line: lines never interleave
        handle.write(line)


def _guarded(original: Callable, log: str) -> Callable:
    def resolve(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else str(host or "")
        if name.rstrip(".").lower().endswith(FORBIDDEN_SUFFIX):
            _record(log, "refused", host=name)
            raise socket.gaierror(socket.EAI_NONAME, f"dns_guard: resolving {name!r} is forbidden in tests")
        return original(host, *args, **kwargs)

    resolve.dns_guard_original = original  # type: ignore[attr-defined]
    return resolve


def install(log: str | os.PathLike) -> Callable[[], None]:
    """Wrap ``socket``'s resolvers in this process; returns a function that restores them.

    Installing twice is a no-op (the second call's restore function does nothing).
    """
    log = str(log)
    if hasattr(socket.getaddrinfo, "dns_guard_original"):
        return lambda: None
    originals = {name: getattr(socket, name) for name in _RESOLVERS}
    for name, original in originals.items():
        setattr(socket, name, _guarded(original, log))
    _record(log, "installed")

    def restore() -> None:
        for name, original in originals.items():
            setattr(socket, name, original)

    return restore


def events(log: str | os.PathLike, since: int = 0) -> list[dict]:
    """The log's events written after byte offset ``since``."""
    path = Path(log)
    if not path.exists():
        return []
    with open(path, "rb") as handle:
        handle.seek(since)
        return [json.loads(line) for line in handle.read().splitlines() if line.strip()]
