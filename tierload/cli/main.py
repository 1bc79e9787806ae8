"""The ``tierload`` command line: a thin layer over the public API.

Every command ends a :class:`tierload.errors.TierloadError` with one line on stderr and a typed
exit code, and any other error with one line too (the traceback with ``--debug`` or
``TIERLOAD_DEBUG=1``): see :mod:`tierload.cli.errors`. Other libraries' notices are held back
(:mod:`tierload.cli.quiet`).
"""

from __future__ import annotations

import importlib

import click

from tierload.cli.child_processes import own_children
from tierload.cli.errors import debug_enabled, fail
from tierload.cli.quiet import configure_output

# Commands that live with the tools beside the library (``tierload_tools``): imported only when
# named, so the library's own commands never load the benchmark or the demo.
TOOL_COMMANDS = {"bench": "tierload_tools.bench.cli:bench", "demo": "tierload_tools.demo.cli:demo"}


class TierloadGroup(click.Group):
    """The command group; an error no command handled still ends as one line and an exit code.

    The tools' commands (:data:`TOOL_COMMANDS`) are listed with the others and imported when run.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *TOOL_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in TOOL_COMMANDS:
            module, _, attribute = TOOL_COMMANDS[cmd_name].partition(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the CLI's last word on any error: one line, a code
            if debug_enabled():
                raise
            fail(exc)


@click.group(cls=TierloadGroup, epilog="Exit codes: 0 done, 1 other error, 2 bad configuration or usage, "
             "3 dataset cannot be described (status: no service running), 4 storage failed, 5 service failed.")
@click.option("--debug", is_flag=True, help="Verbose logs and full tracebacks (also TIERLOAD_DEBUG=1).")
@click.version_option(package_name="tierload")
def cli(debug: bool) -> None:
    """tierload: feed training from S3 through warm and hot tiers managed by Ray actors."""
    configure_output(debug or debug_enabled())


from tierload.cli.policy import policy  # noqa: E402 - commands register on the group above

cli.add_command(policy)

from tierload.cli.service import serve, status, stop  # noqa: E402

for _command in (serve, status, stop):
    cli.add_command(_command)

from tierload.cli.warm import warm  # noqa: E402

cli.add_command(warm)


def main() -> None:
    """The ``tierload`` program: :func:`cli` with every process a command starts ended when it ends
    (returns, fails, Ctrl-C or SIGTERM; see :mod:`tierload.cli.child_processes`)."""
    owner = own_children()
    try:
        cli()
    except SystemExit as exc:
        owner.succeeded = exc.code in (0, None)
        raise
    owner.succeeded = True


if __name__ == "__main__":
    main()
