"""Many S3 range reads in flight at once: coroutines on s3fs's own event loop.

The engine behind :meth:`tierload.stores.cold.source.ColdSource.read_ranges`. Every request is a
coroutine over the aiobotocore client that s3fs holds; at most ``cold.max_in_flight`` of
them are in flight per process (one semaphore per process, event loop and limit), however
many threads or coroutines ask. Per request: ``If-Match`` on the recorded ETag (a changed
object is :class:`~tierload.errors.SourceChangedError`), ranges never longer than
``cold.max_request_bytes``, a short body retried as transient, credentials refreshed once on
``ExpiredToken``. Errors are translated by :func:`tierload.stores.cold.errors.translate_error`;
when to retry is :mod:`tierload.stores.cold.retry`'s decision (the only retry layer: botocore is
built with one attempt), and its :class:`~tierload.stores.cold.retry.AdaptiveLimit` is the
in-flight limit (halved on ``SlowDown``).

Here each GET goes through aiobotocore (``cold.s3_engine: aiobotocore``, or options obstore
cannot carry: :func:`tierload.stores.cold.s3_obstore_config.aiobotocore_reason`); the default
engine, obstore, swaps only that one request (:mod:`tierload.stores.cold.obstore_reads`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tierload.errors import CredentialsExpiredError, SourceChangedError, TransientBackendError
from tierload.stores.cold.errors import error_code, exception_chain, translate_error
from tierload.stores.cold.open_files import process_in_flight
from tierload.stores.cold.request_rate import request_rate_for
from tierload.stores.cold.retry import HEALTH, AdaptiveLimit, Failure, RetryBudget, classify

if TYPE_CHECKING:
    from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

RangeRequest = tuple[str, str, int, int]
"""``(url, version, offset, length)``: ``length`` bytes at ``offset`` of the object at ``url``."""


# One limit per (process, event loop, size): created on the loop that uses it, never inherited
# through fork (a child has another pid, and fsspec gives it another loop).
_limits: dict[tuple[int, int, int], AdaptiveLimit] = {}


def _in_flight_limit(size: int) -> AdaptiveLimit:
    key = (os.getpid(), id(asyncio.get_running_loop()), size)
    limit = _limits.get(key)
    if limit is None:
        limit = _limits[key] = AdaptiveLimit(size)
    return limit


def split_range(offset: int, length: int, step: int) -> list[tuple[int, int]]:
    """``[start, end)`` parts of ``length`` bytes at ``offset``, none longer than ``step``.

    A zero-byte range is one part ``(offset, offset)`` (read as one GET of at most one byte).
    """
    parts = [(start, min(start + step, offset + length)) for start in range(offset, offset + length, step)]
    return parts or [(offset, offset)]


async def gather_in_order(coroutines: Sequence) -> list:
    """Run ``coroutines`` concurrently; their results in order, or the first failure (in order).

    On a failure the others are cancelled, so nothing keeps running (or counting) after the
    caller has its error.
    """
    tasks = [asyncio.ensure_future(coroutine) for coroutine in coroutines]
    if not tasks:
        return []
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()  # no-op for finished tasks; cleans up if the caller was cancelled
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return [task.result() for task in tasks]


def check_length(url: str, start: int, end: int, data: bytes, size: int | None) -> None:
    """Raise unless ``data`` is all of ``[start, end)``.

    Args:
        url: The object's URL (for the error).
        start, end: The range asked for, in bytes.
        data: What came back.
        size: The object's size in bytes as the answer gave it (``None``: unknown).

    Raises:
        SourceChangedError: The object ends before ``end`` (not retried: the manifest's range
            no longer fits the object, or never did).
        TransientBackendError: The body came back short for another reason (retried).
    """
    if len(data) == end - start:
        return
    if size is not None and start + len(data) == size < end:
        raise SourceChangedError(f"bytes [{start}, {end}) reach past the end of the object ({size} bytes): it is "
                                 "shorter than the manifest says; refresh the manifest", tier="cold", url=url)
    raise TransientBackendError(f"short read: {len(data)} of {end - start} bytes", tier="cold", url=url)


class _FailedRequest(Exception):
    """One failed request: its translated error, how it is retried, and the original exception."""

    def __init__(self, error: Any, failure: Failure, cause: BaseException) -> None:
        super().__init__(str(error))
        self.error, self.failure, self.cause = error, failure, cause


class S3RangeReader:
    """Reads byte ranges of S3 objects for one :class:`ColdSource`, many requests at once.

    Args:
        source: The cold source whose client (``source.fs``), configuration and credential
            refresh are used.
    """

    def __init__(self, source: ColdSource) -> None:
        self._source = source
        # Looked up once per reader (one read_ranges call, one event loop), not once per GET.
        self._endpoint = source.location.endpoint_url
        self._limit: AdaptiveLimit | None = None
        self._rate = request_rate_for(source)

    async def read_ranges(self, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        """The bytes of every request, in request order, all fetched concurrently.

        Args:
            requests: ``(url, version, offset, length)`` each.
            tally: ``cold_gets`` and ``cold_bytes`` are increased by what the reads cost.

        Raises:
            SourceChangedError, SourceNotFoundError, EndpointUnreachableError, BackendError,
            TransientBackendError, CredentialsExpiredError: the first failure, in request order.
        """
        return await gather_in_order([self.read_range(*request, tally) for request in requests])

    async def read_range(self, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
        """``length`` bytes at ``offset`` of ``url`` at ``version``, in parts read concurrently."""
        bucket, key = self.bucket_and_key(url)
        step = self._source.config.max_request_bytes
        if length <= step:  # one GET: no task of its own (most reads of small objects)
            end = offset + length
            return await self._get_with_retries(url, bucket, key, version, offset, end, tally)
        parts = await gather_in_order([self._get_with_retries(url, bucket, key, version, start, end, tally)
                                       for start, end in split_range(offset, length, step)])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def bucket_and_key(self, url: str) -> tuple[str, str]:
        """``url``'s bucket and key, as the engine addresses them."""
        bucket, _, key = self._source.fs._strip_protocol(url).partition("/")
        return bucket, key

    async def _get_with_retries(self, url: str, bucket: str, key: str, version: str, start: int, end: int,
                                tally: dict) -> bytes:
        source, config = self._source, self._source.config
        budget: RetryBudget | None = None  # made at the first failure: most GETs never need one
        refreshed = False
        while True:
            generation = source.credentials_generation
            try:
                data = await self._get_counted(url, bucket, key, version, start, end, tally,
                                               budget is not None and budget.attempts > 0)
            except _FailedRequest as failed:
                error, failure = failed.error, failed.failure
                if isinstance(error, CredentialsExpiredError) and source.credential_provider and not refreshed:
                    source.refresh_credentials(generation)
                    refreshed = True
                    continue
                if budget is None:
                    budget = RetryBudget(config.max_attempts, config.outage_budget_s, self._endpoint)
                delay = budget.after_failure(failure)
                name = f"cold_errors_{failure.value}"
                tally[name] = tally.get(name, 0) + 1
                if delay is None:
                    raise budget.final_error(error, failure) from failed.cause
                name = f"cold_retries_{failure.value}"
                tally[name] = tally.get(name, 0) + 1
                # A retry that succeeds is no one's business (INFO, once per read); a read that outlasts
                # max_attempts is riding out an outage: one warning per read, not one per try.
                level = {1: logging.INFO, config.max_attempts: logging.WARNING}.get(budget.attempts, logging.DEBUG)
                log.log(level, "cold read of %s failed (%s); request %d (cold.max_attempts %d, outage budget %gs) "
                        "in %.2fs", url, error, budget.attempts + 1, config.max_attempts, config.outage_budget_s,
                        delay)
                await asyncio.sleep(delay)
                continue
            return data

    async def _get_counted(self, url: str, bucket: str, key: str, version: str, start: int, end: int,
                           tally: dict, retry: bool = False) -> bytes:
        """One request, counted in ``tally`` and in the in-flight limit (``retry``: at the front of its
        queue); failures as :class:`_FailedRequest`."""
        limit = self._limit
        if limit is None:
            limit = self._limit = _in_flight_limit(process_in_flight(self._source.config.max_in_flight))
        if self._rate is not None:  # cold.max_requests_per_s: the turn first, so no slot waits for it
            await self._rate.wait_async()
        token = await limit.acquire(retry)
        outcome: Failure | None = Failure.FINAL
        tally["cold_gets"] = tally.get("cold_gets", 0) + 1
        sent_at = time.monotonic()
        try:
            if end == start:
                data = await self._get_nothing(url, bucket, key, version, start)
            else:
                data, size = await self._get_object(bucket, key, version, start, end)
                check_length(url, start, end, data, size)
            outcome = None
        except Exception as exc:  # noqa: BLE001 - translated and classified in one place, then retried or raised
            error = translate_error(exc, url)
            outcome = classify(error, error_code(exc), (type(cause).__name__ for cause in exception_chain(exc)))
            if outcome in (Failure.FINAL, Failure.THROTTLED):  # the endpoint answered
                HEALTH.answered(self._endpoint, sent_at)
            raise _FailedRequest(error, outcome, exc) from exc
        finally:
            limit.release(token, outcome)
        HEALTH.answered(self._endpoint, sent_at)
        tally["cold_bytes"] = tally.get("cold_bytes", 0) + len(data)
        return data

    async def _get_nothing(self, url: str, bucket: str, key: str, version: str, offset: int) -> bytes:
        """Zero bytes at ``offset``: one GET of at most one byte, so S3 still checks the version.

        Without a ``Range`` the GET would fetch the whole object. An object that ends at or
        before ``offset`` answers 416 ``InvalidRange`` (an empty object always does): zero bytes
        there are still ``b""``. ``If-Match`` is evaluated before the range (RFC 9110, 13.2.2), so
        a changed object is still :class:`~tierload.errors.SourceChangedError`.
        """
        try:
            await self._get_object(bucket, key, version, offset, offset + 1)
        except Exception as exc:
            if error_code(exc) != "InvalidRange":
                raise
        return b""

    async def _get_object(self, bucket: str, key: str, version: str, start: int,
                          end: int) -> tuple[bytes, int | None]:
        """Bytes ``[start, end)`` of ``key`` if its ETag is still ``version`` (one request).

        Returns:
            The body, and the object's size in bytes as the answer gives it (``None``: not
            given), so a short body at the object's end can be told from a broken one.
        """
        if_match = version if version.startswith('"') else None
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if if_match:
            kwargs["IfMatch"] = if_match
        if end > start:
            kwargs["Range"] = f"bytes={start}-{end - 1}"
        response = await self._source.fs._call_s3("get_object", **kwargs)
        body = response["Body"]
        try:
            data = await asyncio.wait_for(body.read(), timeout=self._source.config.read_timeout_s)
        finally:
            body.close()
        return data, object_size(response.get("ContentRange")) if "ContentRange" in response else len(data)

    async def prepare(self, bucket: str) -> None:
        """Make this process's client for ``bucket`` now (no request is sent)."""
        await self._source.fs.set_session()


def object_size(content_range: str | None) -> int | None:
    """The object's size in bytes from a ``Content-Range: bytes a-b/size`` value (``None``: not given)."""
    total = (content_range or "").rpartition("/")[2]
    return int(total) if total.isdigit() else None
