"""Run at the start of every Python process that has ``tests/`` on ``PYTHONPATH``.

With ``TIERLOAD_TEST_DNS_GUARD_LOG`` set (by ``conftest._test_logs``), it installs the
amazonaws.com resolution guard of :mod:`dns_guard` (case B07) in the process: Ray workers
and spawned DataLoader workers start guarded. Without the variable it does nothing.
"""

import os

if os.environ.get("TIERLOAD_TEST_DNS_GUARD_LOG"):
    import dns_guard

    dns_guard.install(os.environ["TIERLOAD_TEST_DNS_GUARD_LOG"])
