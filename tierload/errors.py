"""The errors tierload raises.

Every error is a :class:`TierloadError` and also subclasses the builtin a caller
would naturally catch, so ``except ValueError`` still works for bad config::

    TierloadError
    ├── ConfigError(ValueError)            bad value in config, YAML, CLI or arguments
    │   └── CapacityParseError             "ten gigs" is not a capacity
    ├── CapacityError(RuntimeError)         a block cannot fit in any tier that must hold it
    ├── IntegrityError(IOError)            checksum or block-file header mismatch
    ├── BackendError(OSError)              a storage backend failed (translated SDK error)
    │   ├── EndpointUnreachableError       cannot connect to the configured endpoint
    │   ├── BucketNotFoundError            the bucket does not exist
    │   ├── SourceNotFoundError            the object or prefix does not exist
    │   ├── SourceChangedError             the object's version (ETag) differs from the manifest
    │   ├── CredentialsExpiredError        the cold tier rejected expired credentials
    │   └── TransientBackendError          throttling, reset, 5xx: safe to retry
    ├── ManifestError(ValueError)          the dataset cannot be described (empty prefix, bad layout)
    └── ServiceError(RuntimeError)         a tierload actor or its local channel failed
        ├── ChannelLostError               the node cache's local channel broke or cannot be reached
        └── StreamNotOpenError             the node cache does not know the stream (expired or restarted)
"""

from __future__ import annotations


class TierloadError(Exception):
    """Root of every error tierload raises on purpose.

    Args:
        message: What went wrong and, where known, how to fix it.
        tier: The tier involved (``"cold"``, ``"warm"``, ``"hot"``), if any.
        key: The block key or object key involved, if any.
        url: The URL involved, if any.
    """

    def __init__(self, message: str, *, tier: str | None = None, key: str | None = None,
                 url: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tier = tier
        self.key = key
        self.url = url

    def __str__(self) -> str:
        context = [f"{name}={value!r}" for name, value in
                   (("tier", self.tier), ("key", self.key), ("url", self.url)) if value]
        return f"{self.message} ({', '.join(context)})" if context else self.message

    def __reduce__(self):
        # Keep the keyword-only context when the error crosses a Ray or process boundary.
        return (_rebuild_error, (type(self), self.message, self.tier, self.key, self.url))


def _rebuild_error(cls, message, tier, key, url):
    return cls(message, tier=tier, key=key, url=url)


class ConfigError(TierloadError, ValueError):
    """A configuration value is invalid; the message names the value and what would be right."""


class CapacityParseError(ConfigError):
    """A capacity string could not be parsed as a number of bytes."""


class CapacityError(TierloadError, RuntimeError):
    """A block is larger than the capacity of a tier that must hold it."""


class IntegrityError(TierloadError, IOError):
    """Stored block bytes do not match the checksum recorded when they left the cold tier."""


class BackendError(TierloadError, OSError):
    """A storage backend (s3fs, a file system) failed; the SDK error is the ``__cause__``."""


class EndpointUnreachableError(BackendError):
    """The storage endpoint could not be reached (connection refused, DNS, timeout)."""


class BucketNotFoundError(BackendError):
    """The bucket named in the cold URL does not exist."""


class SourceNotFoundError(BackendError, FileNotFoundError):
    """The object or prefix does not exist in the cold tier."""


class SourceChangedError(BackendError):
    """The object in the cold tier no longer has the version (ETag) recorded in the manifest."""


class CredentialsExpiredError(BackendError, PermissionError):
    """The cold tier rejected the credentials as expired (e.g. S3 ``ExpiredToken``)."""


class TransientBackendError(BackendError):
    """A failure that may succeed when retried: throttling, connection reset, HTTP 5xx."""


class ManifestError(TierloadError, ValueError):
    """The dataset cannot be described from what the cold prefix holds."""


class ServiceError(TierloadError, RuntimeError):
    """A tierload actor, or the local channel to it, failed.

    Attributes:
        where: Which process or thread raised the original error.
        remote_traceback: The original traceback text, kept across the process boundary.
    """

    def __init__(self, message: str, *, where: str = "", remote_traceback: str = "", **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.where = where
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = super().__str__()
        if self.where:
            text = f"{text} [raised in {self.where}]"
        if self.remote_traceback:
            text = f"{text}\n--- remote traceback ---\n{self.remote_traceback}"
        return text

    def __reduce__(self):
        return (_rebuild_service_error, (self.message, self.where, self.remote_traceback))


def _rebuild_service_error(message, where, remote_traceback):
    return ServiceError(message, where=where, remote_traceback=remote_traceback)


class ChannelLostError(ServiceError):
    """The node cache's local channel broke or cannot be reached (the actor died or restarted)."""


class StreamNotOpenError(ServiceError):
    """The node cache does not know the stream: it expired while idle, or the cache restarted."""
