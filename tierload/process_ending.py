"""Ending processes: SIGTERM, then SIGKILL for those still running after a grace period.

Used by the CLI's record of the processes a command started (:mod:`tierload.cli.child_processes`)
and by the local Ray start that ends what a failed try left (:mod:`tierload.deploy.local_ray`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil


def end_processes(processes: list[psutil.Process], grace_s: float) -> None:
    """Send each of ``processes`` SIGTERM; SIGKILL those still running after ``grace_s`` seconds,
    and wait up to ``grace_s`` more for them to go. A process already gone is skipped."""
    import psutil

    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
