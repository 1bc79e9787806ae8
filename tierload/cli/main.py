"""The ``tierload`` command line: a thin layer over the public API.

Each command maps :class:`tierload.errors.TierloadError` subclasses to an exit code and a
one-line message (``--debug`` shows the traceback): see :mod:`tierload.cli.errors`.
"""

from __future__ import annotations

import logging

import click


@click.group()
@click.option("--debug", is_flag=True, help="Verbose logs and full tracebacks.")
@click.version_option(package_name="tierload")
def cli(debug: bool) -> None:
    """tierload: feed training from S3 through warm and hot tiers managed by Ray actors."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("botocore", "aiobotocore", "s3fs", "urllib3", "fsspec", "asyncio", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


from tierload.cli.demo import demo  # noqa: E402 - commands register on the group above

cli.add_command(demo)

from tierload.cli.policy import policy  # noqa: E402

cli.add_command(policy)

from tierload.cli.bench import bench  # noqa: E402

cli.add_command(bench)

from tierload.cli.service import serve, status, stop  # noqa: E402

for _command in (serve, status, stop):
    cli.add_command(_command)


if __name__ == "__main__":
    cli()
