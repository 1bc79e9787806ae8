"""Whether this process is connected to Ray, asked without ever importing Ray.

Asked from background threads (the keeper, metrics) while the main thread may be importing Ray
itself: a module still being imported sits in ``sys.modules`` without its names yet.
"""

from __future__ import annotations

import sys


def ray_connected() -> bool:
    """Whether this process is connected to Ray now (never imports Ray; False while another
    thread is still importing it)."""
    is_initialized = getattr(sys.modules.get("ray"), "is_initialized", None)
    return is_initialized is not None and bool(is_initialized())
