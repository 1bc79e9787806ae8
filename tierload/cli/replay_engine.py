"""Which replay ``tierload policy simulate`` runs, and what it says while the compiled one is built.

The compiled replay (:mod:`tierload.simulator.fast`) takes about a CPU-minute to compile on first
use after an install (then it loads from numba's cache in a fraction of a second). Measured on
the 2-core machine, default settings (40,000 accesses, 8 replays and MIN): the first run spent
62 CPU-s compiling and printed nothing; the reference engine replays the same in ~1.3 CPU-s.
So, until the compiled replay is built:

- a trace the reference engine replays in less time than the compile takes
  (:data:`REFERENCE_ACCESSES` replayed accesses, at ~300,000 a CPU-second) is replayed by it
  (the same decision at every access, tests/test_fast_simulator.py), while a child process
  compiles in the background for the next runs (it is left to finish when the command
  succeeds, ended with it otherwise, see :mod:`tierload.cli.child_processes`);
- a larger one waits for the compile, with a line and a progress bar.

Either way one line on stderr says what is happening.
"""

from __future__ import annotations

import os
import subprocess
import sys

import click

REFERENCE_ACCESSES = 10_000_000  # ~35 CPU-s of reference replay: still less than the ~60 CPU-s compile
BUILD = "from tierload.simulator.fast import warm_up; warm_up()"
BUILD_NICE = 10  # the background compile yields the cores to the replay the user waits for


def _build_in_background() -> int | None:
    """Start the compile in a child process; returns its pid (None: it could not start)."""
    from tierload.cli.child_processes import owner

    def lower_priority() -> None:
        os.nice(BUILD_NICE)

    try:
        child = subprocess.Popen([sys.executable, "-c", BUILD], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, preexec_fn=lower_priority)
    except OSError:
        return None
    ours = owner()
    if ours is not None:
        ours.keep_on_success(child.pid)
    return child.pid


def compile_with_bar(reason: str) -> None:
    """Compile the replay now, saying why on stderr, with a bar over its steps (on a terminal)."""
    from tqdm import tqdm

    from tierload.simulator.fast.readiness import compile_steps

    click.echo(f"compiling the simulator's replay ({reason}; once per install, about a CPU-minute; "
               "later runs load it in a second)", err=True)
    steps = compile_steps()
    # disable=None: the bar shows on a terminal only, so --json output and logs stay clean.
    with tqdm(total=len(steps), unit="step", desc="compiling", leave=False, disable=None) as bar:
        for name, step in steps:
            bar.set_postfix_str(name)
            step()
            bar.update(1)


def choose_engine(replayed_accesses: int) -> str:
    """The engine for a run that replays ``replayed_accesses`` accesses in all (every replay and MIN).

    Returns:
        ``"auto"`` (the compiled replay, built now if it was not) or ``"reference"``.
    """
    from tierload.simulator.fast.readiness import is_compiled

    if is_compiled():
        return "auto"
    if replayed_accesses <= REFERENCE_ACCESSES:
        pid = _build_in_background()
        where = f"in the background (pid {pid}; once per install, about a CPU-minute)" if pid else "on a later run"
        click.echo(f"the simulator's compiled replay is not built yet: building it {where}; this run replays "
                   f"{replayed_accesses:,} accesses with the reference engine, which decides the same", err=True)
        return "reference"
    compile_with_bar(f"{replayed_accesses:,} accesses to replay")
    return "auto"
