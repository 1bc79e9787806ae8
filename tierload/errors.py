"""The errors tierload raises.

Every error is a :class:`TierloadError` and also subclasses the builtin a caller
would naturally catch, so ``except ValueError`` still works for bad config::

    TierloadError
    ├── ConfigError(ValueError)            bad value in config, YAML, CLI or arguments
    │   ├── CapacityParseError             "ten gigs" is not a capacity
    │   ├── UntrustedDirError              a tier dir another user owns or may write (not shared on purpose)
    │   └── SampleIndexError(IndexError)   a sample index outside the dataset (``ds[i]``, ``sampler=``)
    ├── CapacityError(RuntimeError)         a block cannot fit in any tier that must hold it
    ├── MissingDependencyError(ImportError) an optional package a feature needs is not installed
    ├── IntegrityError(IOError)            checksum or block-file header mismatch
    ├── BackendError(OSError)              a storage backend failed (translated SDK error)
    │   ├── EndpointUnreachableError       cannot connect to the configured endpoint
    │   ├── BucketNotFoundError            the bucket does not exist
    │   ├── SourceNotFoundError            the object or prefix does not exist
    │   ├── SourceChangedError             the object's version (ETag) differs from the manifest
    │   ├── CredentialsExpiredError        the cold tier rejected expired credentials
    │   ├── AccessDeniedError              the cold tier refused these credentials on the object or prefix
    │   └── TransientBackendError          throttling, reset, 5xx: safe to retry
    ├── ManifestError(ValueError)          the dataset cannot be described (empty prefix, bad layout)
    │   └── ManifestMismatchError          ranks of one job listed different contents (torch.distributed)
    ├── DecodeError(ValueError)            block bytes do not decode into samples (not an image, bad tar)
    │   └── BadLineError                   a JSONL line is not JSON (names the file and line number)
    ├── CodecError(ValueError)             bytes do not decode as zstd (a frame decoder makes it IntegrityError)
    └── ServiceError(RuntimeError)         a tierload actor or its local channel failed
        ├── ChannelLostError               the node cache's local channel broke or cannot be reached
        ├── StreamNotOpenError             the node cache does not know the stream (expired or restarted)
        ├── MessageError                   a message from another process has the wrong type or version
        ├── MethodNotAllowedError          a channel call names a method the server does not serve
        └── TierInUseError                 a tier directory is owned by a node cache this job cannot join

Every error pickles back as its own class with its context (tier, key, url, where, remote
traceback), so one raised in an actor or behind the local channel can be caught by type.
"""

from __future__ import annotations


class TierloadError(Exception):
    """Root of every error tierload raises on purpose.

    Args:
        message: What went wrong and, where known, how to fix it.
        tier: The tier involved (``"cold"``, ``"warm"``, ``"hot"``), if any.
        key: The block key or object key involved, if any.
        url: The URL involved, if any.
        where: Which process or thread raised it, when it crossed a process boundary.
        remote_traceback: The original traceback text, kept across the process boundary.
    """

    def __init__(self, message: str, *, tier: str | None = None, key: str | None = None,
                 url: str | None = None, where: str = "", remote_traceback: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.tier = tier
        self.key = key
        self.url = url
        self.where = where
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        context = [f"{name}={value!r}" for name, value in
                   (("tier", self.tier), ("key", self.key), ("url", self.url)) if value]
        return f"{self.message} ({', '.join(context)})" if context else self.message

    def __reduce__(self):
        # Rebuild the same class and restore every attribute (the keyword-only context, and the
        # remote traceback a channel attaches), whatever a subclass's constructor looks like.
        return (_rebuild_error, (type(self), self.message), dict(self.__dict__))


def _rebuild_error(cls: type[TierloadError], message: str) -> TierloadError:
    error = cls.__new__(cls, message)
    Exception.__init__(error, message)
    return error  # pickle then restores __dict__ (BaseException.__setstate__)


class ConfigError(TierloadError, ValueError):
    """A configuration value is invalid; the message names the value and what would be right."""


class CapacityParseError(ConfigError):
    """A capacity string could not be parsed as a number of bytes."""


class UntrustedDirError(ConfigError):
    """A tier directory another user owns, or group/others may write, and the config does not
    say it is shared on purpose (``hot.shared`` / ``warm.shared``)."""


class SampleIndexError(ConfigError, IndexError):
    """A sample index outside the dataset, from ``ds[i]`` or a ``sampler=``; the message names the
    index and the valid range (an ``IndexError`` too, so ``Sequence`` protocols stop on it)."""


class CapacityError(TierloadError, RuntimeError):
    """A block is larger than the capacity of a tier that must hold it."""


class MissingDependencyError(TierloadError, ImportError):
    """An optional package a requested feature needs is not installed.

    Args:
        message: What needs it and how to install it.
        package: The missing package's import name (e.g. ``"matplotlib"``).
        extra: The tierload extra that brings it (e.g. ``"bench"``).
    """

    def __init__(self, message: str, *, package: str = "", extra: str = "", **context) -> None:
        super().__init__(message, **context)
        self.package = package
        self.extra = extra


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


class AccessDeniedError(BackendError, PermissionError):
    """The cold tier refused the credentials on the dataset's object or prefix (S3 ``AccessDenied``,
    ``InvalidAccessKeyId``); a node cache refuses that job its cached blocks of the dataset too."""


class TransientBackendError(BackendError):
    """A failure that may succeed when retried: throttling, connection reset, HTTP 5xx."""


class ManifestError(TierloadError, ValueError):
    """The dataset cannot be described from what the cold prefix holds."""


class ManifestMismatchError(ManifestError):
    """The ranks of one ``torch.distributed`` job hold different manifests of the dataset (e.g. they
    listed the prefix at different moments, or one reused an older cached listing); the message
    names every rank's listing (samples, blocks, digest, when it was listed)."""


class DecodeError(TierloadError, ValueError):
    """Block bytes could not be decoded into samples (e.g. not an image, not a run of tar members)."""


class BadLineError(DecodeError):
    """A line of a JSONL file does not parse as JSON.

    Args:
        message: The file, the line number and the fix (``manifest.on_bad_lines: skip``).
        line: The bad line's number in its file (1-based, counted in the decompressed text).
        **context: As :class:`TierloadError` (``url`` is the file).
    """

    def __init__(self, message: str, *, line: int = 0, **context) -> None:
        super().__init__(message, **context)
        self.line = line


class CodecError(TierloadError, ValueError):
    """A wire payload could not be decoded: unknown codec, or it decoded to the wrong size."""


class ServiceError(TierloadError, RuntimeError):
    """A tierload actor, or the local channel to it, failed.

    Its text names where the original error was raised and carries its traceback.
    """

    def __str__(self) -> str:
        text = super().__str__()
        if self.where:
            text = f"{text} [raised in {self.where}]"
        if self.remote_traceback:
            text = f"{text}\n--- remote traceback ---\n{self.remote_traceback}"
        return text


class ChannelLostError(ServiceError):
    """The node cache's local channel broke or cannot be reached (the actor died or restarted)."""


class StreamNotOpenError(ServiceError):
    """The node cache does not know the stream: it expired while idle, or the cache restarted."""


class MessageError(ServiceError):
    """A message from another process is not what this process understands (wrong type or version,
    e.g. a node cache and a consumer running different tierload releases)."""


class MethodNotAllowedError(ServiceError):
    """A channel call named a method the server does not serve (it is not on its allow-list)."""


class TierInUseError(ServiceError):
    """A tier directory is owned by a live node cache whose configuration differs from this job's
    (the message names the owner, each differing setting, and how to stop the owner)."""
