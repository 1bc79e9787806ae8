"""How the command line reports tierload's errors: one line on stderr and a typed exit code.

Exit codes (also in ``tierload --help``): 0 done; 1 a tierload error of no class below
(integrity, capacity, a missing optional package) or an unexpected error; 2 a bad configuration
value or command-line usage (click's own code); 3 the dataset cannot be described (:class:`ManifestError`), and for
``tierload status`` "no service is running" (the LSB convention for a status command); 4 a
storage backend failed; 5 a tierload actor or its channel failed.

The one line reads ``tierload: <ErrorClass>: <message>`` followed by a hint on what to check.
The traceback is shown only with ``--debug`` or ``TIERLOAD_DEBUG=1``. Kept apart from
:mod:`tierload.cli.main` so that command modules import it without importing the group that
imports them.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Callable, NoReturn, TypeVar

import click

from tierload.errors import (
    BackendError,
    BucketNotFoundError,
    CapacityError,
    ConfigError,
    CredentialsExpiredError,
    EndpointUnreachableError,
    ManifestError,
    MissingDependencyError,
    ServiceError,
    SourceChangedError,
    TierloadError,
)

T = TypeVar("T")

# Checked in order, so a subclass listed here would have to come before its base.
EXIT_CODES: tuple[tuple[type[TierloadError], int], ...] = (
    (ConfigError, 2), (ManifestError, 3), (BackendError, 4), (ServiceError, 5))
OTHER_ERROR_EXIT_CODE = 1  # a TierloadError of no class above (integrity, capacity), or a bug
NOT_RUNNING_EXIT_CODE = 3  # `tierload status` with no service: LSB's "program is not running"
DEBUG_ENV = "TIERLOAD_DEBUG"

# What to check next, by class (most specific first); the message already names the bad value.
HINTS: tuple[tuple[type[TierloadError], str], ...] = (
    (EndpointUnreachableError, "check cold.endpoint_url (or AWS_ENDPOINT_URL) and that the endpoint answers"),
    (BucketNotFoundError, "check the bucket's name and region (cold.region)"),
    (CredentialsExpiredError, "refresh the credentials (or set cold.credential_provider)"),
    (SourceChangedError, "the objects changed since the listing: run again with refresh_manifest=True"),
    (BackendError, "check the URL, the credentials and the tier's directory or endpoint"),
    (CapacityError, "`tierload policy show` prints each tier's capacity_bytes"),
    (MissingDependencyError, "install the extra the message names, or leave out the option that needs it"),
    (ConfigError, "`tierload policy validate FILE` lists every problem; defaults: `tierload policy show`"),
    (ManifestError, "check the URL's prefix and the layout (manifest.layout)"),
    (ServiceError, "`tierload status` shows what runs; `tierload serve --address auto` starts the service"),
)


def debug_enabled() -> bool:
    """True with ``--debug`` (logging at DEBUG) or ``TIERLOAD_DEBUG`` set to anything but 0/false/empty."""
    flag = os.environ.get(DEBUG_ENV, "").strip().lower()
    return flag not in ("", "0", "false", "no") or logging.getLogger().isEnabledFor(logging.DEBUG)


def exit_code_of(exc: TierloadError) -> int:
    """The exit status the CLI ends with after ``exc``."""
    return next((code for cls, code in EXIT_CODES if isinstance(exc, cls)), OTHER_ERROR_EXIT_CODE)


def hint_of(exc: TierloadError) -> str:
    """What to check after ``exc`` (empty when there is nothing general to say)."""
    return next((hint for cls, hint in HINTS if isinstance(exc, cls)), "")


def one_line(exc: BaseException) -> str:
    """``tierload: Class: message; hint: ...`` without a remote traceback.

    A :class:`ServiceError` carries the traceback of the process that raised it; that part is
    left to ``--debug``. A configuration error's message may list several problems, one a line.
    """
    if isinstance(exc, TierloadError):
        text = TierloadError.__str__(exc)
        if exc.where:
            text = f"{text} [raised in {exc.where}]"
        hint = hint_of(exc)
    else:
        text, hint = str(exc), "this is a bug in tierload or a library: please report it with --debug's output"
    text = text.rstrip() or type(exc).__name__
    return f"tierload: {type(exc).__name__}: {text}" + (f" (hint: {hint}; --debug shows the traceback)"
                                                          if hint else "")


def fail(exc: BaseException) -> NoReturn:
    """Print ``exc`` as :func:`one_line` on stderr and exit with its code."""
    click.echo(one_line(exc), err=True)
    sys.exit(exit_code_of(exc) if isinstance(exc, TierloadError) else OTHER_ERROR_EXIT_CODE)


def handle_errors(command: Callable[..., T]) -> Callable[..., T]:
    """Wrap ``command`` so a :class:`TierloadError` becomes one line on stderr and its exit code.

    In debug mode (:func:`debug_enabled`) the error propagates with its traceback instead.
    """
    @functools.wraps(command)
    def wrapper(*args, **kwargs) -> T:
        try:
            return command(*args, **kwargs)
        except TierloadError as exc:
            if debug_enabled():
                raise
            fail(exc)
    return wrapper
