"""A listing or HEAD request of the cold tier, sent again as :mod:`tierload.stores.cold.retry` decides.

Range reads retry inside their coroutines (:mod:`tierload.stores.cold.async_reads`); the blocking
requests (a listing, a HEAD) go through :func:`call_with_retries`, so both follow one policy:
``cold.max_attempts`` requests for a request that keeps failing, ``cold.outage_budget_s``
while the endpoint fails as a whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tierload.config.models import ColdConfig
from tierload.stores.cold.errors import error_code, exception_chain, translate_error
from tierload.stores.cold.request_rate import RequestRate
from tierload.stores.cold.retry import HEALTH, RetryBudget, classify

log = logging.getLogger(__name__)

T = TypeVar("T")


def call_with_retries(url: str, call: Callable[[], T], config: ColdConfig, endpoint: str,
                      notes_health: bool, rate: RequestRate | None = None) -> T:
    """``call()``, retried as :mod:`tierload.stores.cold.retry` decides; its errors translated.

    Args:
        url: What the request is about, named in errors and logs.
        call: The request (a listing or a HEAD); it raises the SDK's errors.
        config: ``cold.max_attempts`` and ``cold.outage_budget_s``.
        endpoint: The S3 endpoint URL (empty when none): whose health the budget follows.
        notes_health: Record that ``endpoint`` answered when ``call`` succeeds (S3 only).
        rate: The store's ``cold.max_requests_per_s`` limit: each request (a retry too) takes a
            turn first; None: no limit.

    Returns:
        What ``call`` returned.

    Raises:
        TierloadError: The translated error once the budget says stop (see
            :meth:`~tierload.stores.cold.retry.RetryBudget.final_error`).
    """
    # An endpoint this process never reached is, at start-up, a wrong endpoint far more often than
    # an outage: the listing fails after cold.max_attempts requests instead of waiting out the budget.
    budget = RetryBudget(config.max_attempts, config.outage_budget_s, endpoint,
                         rides_outages=HEALTH.ever_answered(endpoint))
    while True:
        if rate is not None:
            rate.wait()
        sent_at = time.monotonic()
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - translated and classified in one place
            error = translate_error(exc, url)
            failure = classify(error, error_code(exc), (type(cause).__name__ for cause in exception_chain(exc)))
            delay = budget.after_failure(failure)
            if delay is None:
                raise budget.final_error(error, failure) from exc
            # As for reads (cold_async): a warning only once the request outlasts max_attempts.
            level = logging.WARNING if budget.attempts == config.max_attempts else logging.INFO
            log.log(level, "cold tier request for %s failed (%s); retrying in %.2fs", url, error, delay)
            time.sleep(delay)
            continue
        if notes_health:
            HEALTH.answered(endpoint, sent_at)
        return result
