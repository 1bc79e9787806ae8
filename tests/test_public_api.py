"""The public API is what ``__all__`` says, sorted; the CLI maps errors to one line and a code."""

from __future__ import annotations

from click.testing import CliRunner

import tierload
from tierload.cli.main import cli


def test_all_is_the_sorted_public_api():
    assert tierload.__all__ == sorted(tierload.__all__)
    for name in tierload.__all__:
        assert getattr(tierload, name).__doc__, f"{name} has no docstring"


def test_every_error_is_a_tierload_error_and_a_builtin():
    for name in tierload.__all__:
        cls = getattr(tierload, name)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not tierload.TierloadError:
            assert issubclass(cls, tierload.TierloadError)
            assert any(base.__module__ == "builtins" for base in cls.__mro__[1:-1])


def test_cli_reports_bad_input_in_one_line_with_a_typed_exit_code():
    result = CliRunner().invoke(cli, ["demo", "--epochs", "0"])
    assert result.exit_code == 2 and "--epochs" in result.output
    assert CliRunner().invoke(cli, ["--version"]).output.strip().endswith(tierload.__version__)
