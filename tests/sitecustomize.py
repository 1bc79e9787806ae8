"""Run at the start of every Python process that has ``tests/`` on ``PYTHONPATH``.

With ``TIERLOAD_TEST_SLOW_AGENT_FLAG`` set, the first Ray dashboard agent starts slowly
(:mod:`slow_agent`). With ``TIERLOAD_TEST_DNS_GUARD_LOG`` set (by ``conftest._test_logs``), it installs the
amazonaws.com resolution guard of :mod:`dns_guard` (case B07) in the process: Ray workers
and spawned DataLoader workers start guarded. Without either variable it does nothing.
"""

import os

if os.environ.get("TIERLOAD_TEST_DNS_GUARD_LOG"):
    import dns_guard

    dns_guard.install(os.environ["TIERLOAD_TEST_DNS_GUARD_LOG"])

if os.environ.get("TIERLOAD_TEST_SLOW_AGENT_FLAG"):
    import slow_agent

    slow_agent.install(os.environ["TIERLOAD_TEST_SLOW_AGENT_FLAG"])
