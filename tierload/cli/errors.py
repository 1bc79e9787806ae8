"""How the command line reports tierload's errors: one line on stderr and a typed exit code.

Kept apart from :mod:`tierload.cli.main` so that command modules import it without importing
the group that imports them.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Callable, TypeVar

import click

from tierload.errors import BackendError, ConfigError, ManifestError, ServiceError, TierloadError

T = TypeVar("T")

# Checked in order, so a subclass listed here would have to come before its base.
EXIT_CODES: tuple[tuple[type[TierloadError], int], ...] = (
    (ConfigError, 2), (ManifestError, 3), (BackendError, 4), (ServiceError, 5))
OTHER_ERROR_EXIT_CODE = 1  # a TierloadError of no class above (integrity, capacity)


def exit_code_of(exc: TierloadError) -> int:
    """The exit status the CLI ends with after ``exc``."""
    return next((code for cls, code in EXIT_CODES if isinstance(exc, cls)), OTHER_ERROR_EXIT_CODE)


def handle_errors(command: Callable[..., T]) -> Callable[..., T]:
    """Wrap ``command`` so a :class:`TierloadError` becomes one line on stderr and its exit code.

    With ``--debug`` (logging at DEBUG) the error propagates with its traceback instead.
    """
    @functools.wraps(command)
    def wrapper(*args, **kwargs) -> T:
        try:
            return command(*args, **kwargs)
        except TierloadError as exc:
            if logging.getLogger().isEnabledFor(logging.DEBUG):
                raise
            click.echo(f"tierload: {type(exc).__name__}: {exc}", err=True)
            sys.exit(exit_code_of(exc))
    return wrapper
