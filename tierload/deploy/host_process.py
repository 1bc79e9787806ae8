"""The service host process: ``python -m tierload.deploy.host_process FD``.

Started by a training process without Ray (:mod:`tierload.deploy.host`), with its end of a socket
pair as ``FD``. Each :class:`~tierload.wire.messages.CacheRequest` is answered by
:func:`~tierload.deploy.runtime.node_endpoint`, which starts or joins Ray here and finds or starts
the node cache; the process ends when the training process's end closes, or on SIGTERM, and its
exit hooks close the caches it started and shut its Ray down.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from tierload.config.loading import as_config
from tierload.deploy.runtime import node_endpoint
from tierload.errors import ServiceError, TierloadError
from tierload.wire.messages import CacheAnswer, CacheRequest

log = logging.getLogger(__name__)


def _answer(received: Any) -> CacheAnswer:
    request_id = getattr(received, "request_id", -1)
    try:
        request = CacheRequest.received(received)
        return CacheAnswer(request_id, node_endpoint(as_config(request.config)), None)
    except TierloadError as exc:
        return CacheAnswer(request_id, None, exc)
    except Exception as exc:  # noqa: BLE001 - Ray raises many types, not all of which pickle: say what it was
        log.debug("the service host could not start the node cache", exc_info=True)
        return CacheAnswer(request_id, None, ServiceError(f"tierload's service host could not start the node cache: "
                                                          f"{type(exc).__name__}: {exc}"))


def serve(connection: Connection) -> None:
    """Answer requests until the training process's end of the connection closes."""
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        try:
            connection.send(_answer(request))
        except OSError:  # the training process let go while the cache started: nobody to answer
            return


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the exit hooks close the caches and shut Ray down


def main(argv: list[str]) -> None:
    """``python -m tierload.deploy.host_process FD``: serve the training process on socket ``FD``."""
    fd = int(argv[1])
    os.set_inheritable(fd, False)  # Ray's processes started from here must not hold the training process alive
    # Ray's driver imports pyarrow to register serializers for Ray Data's values (25 MB of RSS here for the
    # job's life) wherever it is installed; nothing the host sends or receives is Arrow data. A module set to
    # None in sys.modules is one Python reports missing (ModuleNotFoundError), and Ray then skips them.
    sys.modules.setdefault("pyarrow", None)  # type: ignore[arg-type]
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(level=logging.WARNING, format="tierload host: %(levelname)s %(name)s: %(message)s")
    serve(Connection(fd))


if __name__ == "__main__":
    main(sys.argv)
