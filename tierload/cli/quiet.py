"""What the command line prints besides its own output: tierload's warnings, and little else.

Ray announces itself (its token-authentication notice, "Started a local Ray instance") and
libraries warn about their own deprecations; none of that is the user's business when a command
works, so outside debug mode only errors of those loggers and the warnings tierload's own modules
address to users (``UserWarning``) reach the terminal.
"""

from __future__ import annotations

import logging
import warnings

# Loggers held to ERROR outside debug mode. Ray sets its "ray" logger to INFO when imported (after
# this runs), so its chatty children are held here: a child's own level wins over its parent's.
NOISY_LOGGERS = ("ray._private", "ray.util", "ray._common", "botocore", "aiobotocore", "s3fs", "urllib3",
                 "fsspec", "asyncio", "werkzeug", "numba", "filelock")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIET_FORMAT = "tierload: %(levelname)s: %(message)s"


def configure_output(debug: bool) -> None:
    """Set up logging and warnings for one command.

    Args:
        debug: Verbose logs (DEBUG, every library) and every warning; otherwise tierload's own
            warnings in one short line each, other libraries' only at ERROR.
    """
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format=FORMAT if debug else QUIET_FORMAT)
    level = logging.NOTSET if debug else logging.ERROR
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(level)
    if debug:
        warnings.simplefilter("default")
        return
    warnings.simplefilter("ignore")
    warnings.filterwarnings("default", category=UserWarning, module=r"tierload(\.|$)")
