"""The cold tier's SDK errors translated, in one place, into :mod:`tierload.errors` types.

s3fs, botocore, aiohttp and the OS each raise their own exceptions; every cold-tier read,
listing and HEAD passes what it caught through :func:`translate_error` (with ``raise ... from
exc``), and the retry layer (:mod:`tierload.stores.cold.retry`) classifies the result with
:func:`error_code` and the names along :func:`exception_chain`.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

from tierload.errors import (
    AccessDeniedError,
    BackendError,
    BucketNotFoundError,
    ConfigError,
    CredentialsExpiredError,
    EndpointUnreachableError,
    SourceChangedError,
    SourceNotFoundError,
    TierloadError,
    TransientBackendError,
)

_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                    "ServiceUnavailable", "503", "500", "502", "504"}


def error_code(exc: BaseException) -> str:
    """The S3 error code of ``exc`` or of its first cause that has one (empty when none)."""
    cause: BaseException | None = exc
    while cause is not None:
        response = getattr(cause, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code", ""))
        cause = cause.__cause__ or cause.__context__
    return ""


def translate_error(exc: BaseException, url: str) -> TierloadError:
    """Map an s3fs/botocore/aiohttp/OS error to the matching tierload error type.

    Setup mistakes the SDK words its own way (no credentials, an option it does not take, an
    endpoint without a scheme) become a :class:`ConfigError` that names the value and the fix.
    """
    if isinstance(exc, TierloadError):
        return exc
    code = error_code(exc)
    text = str(exc)
    names = {type(c).__name__ for c in exception_chain(exc)}
    mistake = _setup_mistake(exc, names, url)
    if mistake is not None:
        return mistake
    if any(isinstance(cause, OSError) and cause.errno == errno.EMFILE for cause in exception_chain(exc)):
        from tierload.stores.cold.open_files import open_files_limit, open_files_now

        return BackendError(f"too many open files: this process may open {open_files_limit()} (RLIMIT_NOFILE) and "
                            f"has {open_files_now()} open; raise the limit (ulimit -n) or lower cold.max_in_flight",
                            tier="cold", url=url)
    if names & {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError",
                "ConnectionRefusedError", "ServerDisconnectedError", "gaierror"} and not code:
        return EndpointUnreachableError(f"cannot reach the cold tier's endpoint: {text}", tier="cold", url=url)
    if code == "NoSuchBucket" or "bucket does not exist" in text.lower():
        return BucketNotFoundError("the bucket does not exist; check the URL and the endpoint", tier="cold",
                                   url=url)
    if code == "InvalidRange":  # 416: the range starts at or past the object's end
        return SourceChangedError("the byte range starts past the end of the object: it is shorter than the "
                                  "manifest says; refresh the manifest", tier="cold", url=url)
    if code == "PreconditionFailed":
        return SourceChangedError("the object changed since the manifest was built (ETag differs); "
                                  "refresh the manifest", tier="cold", url=url)
    if isinstance(exc, FileNotFoundError) or code in ("NoSuchKey", "404"):
        return SourceNotFoundError("no such object or prefix", tier="cold", url=url)
    if code in _TRANSIENT_CODES or names & {"ClientPayloadError", "IncompleteRead", "ReadTimeoutError",
                                            "TimeoutError", "ConnectionResetError", "FSTimeoutError",
                                            "BodyBrokenError"}:
        return TransientBackendError(f"transient cold-tier failure: {text}", tier="cold", url=url)
    if code in ("ExpiredToken", "ExpiredTokenException", "TokenRefreshRequired"):
        return CredentialsExpiredError(f"the cold tier says the credentials expired ({code})", tier="cold", url=url)
    if isinstance(exc, PermissionError) or code in ("AccessDenied", "InvalidAccessKeyId"):
        return AccessDeniedError(f"access denied by the cold tier ({code or 'permission'}): {text}", tier="cold",
                            url=url)
    return BackendError(f"cold tier failed: {type(exc).__name__}: {text}", tier="cold", url=url)


_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '([^']+)'")


def _setup_mistake(exc: BaseException, names: set[str], url: str) -> ConfigError | None:
    """A first-use mistake the SDK reports in its own words, as a :class:`ConfigError` with the fix."""
    if names & {"NoCredentialsError", "PartialCredentialsError"}:
        return ConfigError("no AWS credentials found for the cold tier: set AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), pass storage_options={'key': ..., 'secret': ...}"
                           " (cold.storage_options), or cold.anon: true for a public bucket", tier="cold", url=url)
    for cause in exception_chain(exc):
        unexpected = _UNEXPECTED_KEYWORD.search(str(cause)) if isinstance(cause, TypeError) else None
        if unexpected:
            return ConfigError(f"the S3 client does not take the option {unexpected.group(1)!r} (from "
                               "cold.storage_options, its client_kwargs or config_kwargs): check its spelling",
                               tier="cold", url=url)
        if isinstance(cause, ValueError) and str(cause).startswith("Invalid endpoint"):
            endpoint = str(cause).removeprefix("Invalid endpoint:").strip()
            return ConfigError(f"the S3 endpoint {endpoint!r} is not a URL: give cold.endpoint_url with its scheme, "
                               f"e.g. http://{endpoint}", tier="cold", url=url)
    return None


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then its causes and contexts in turn (each once)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
