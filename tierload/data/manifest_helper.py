"""The manifest built in a helper process: the listing never enters the process that asks.

At a million keys the listing's columns, the plan's temporaries and the writer's buffers are
hundreds of MB at their peak, and a process's heap rarely gives all of it back. A training
process pays that in every rank for the rest of the job, although it only ever needs the
finished manifest, which it maps read-only (:func:`tierload.data.manifest.open_manifest`). So
:func:`load_manifest_apart` lists, plans and writes the Arrow IPC file in a short-lived child
process (``python -m tierload.data.manifest_helper``, started before Ray, so its peak and Ray's
never add up) and maps the file the child hands back. A cached manifest is mapped at once,
without a child.

The child gets its work as one pickled :class:`ManifestJob` on stdin and answers with one pickled
:class:`ManifestAnswer` on stdout; a :class:`~tierload.errors.TierloadError` it raises comes back
as its own class (errors pickle with their context), marked with ``where``. The child ends with
the call: an interrupt (Ctrl-C, SIGTERM turned into an exception) in the caller kills it.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from tierload.config.models import ManifestConfig
from tierload.data.manifest import Manifest, build_manifest, cache_path, open_manifest, save_manifest
from tierload.errors import ManifestError, TierloadError
from tierload.process_memory import release_freed_memory
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

# The version of ManifestJob / ManifestAnswer: a child of another tierload refuses the job.
HELPER_VERSION = 1
# The child's stderr kept for an error message when it dies without an answer (bytes).
STDERR_TAIL = 3000


@dataclass(frozen=True)
class ManifestJob:
    """What the helper builds: the manifest file of ``(source, config, layout)``, always listed
    anew (the caller maps a readable cached file itself)."""

    source: ColdSource
    config: ManifestConfig
    layout: str | None
    version: int = HELPER_VERSION


@dataclass(frozen=True)
class ManifestAnswer:
    """The helper's answer.

    Attributes:
        path: The manifest file it wrote (or found), or None when ``error`` is set.
        error: What it raised, when it failed.
        pid: The helper's process id.
        peak_rss_bytes: The helper's peak RSS (``VmHWM``), bytes; 0 where unknown.
    """

    path: str | None
    error: BaseException | None
    pid: int
    peak_rss_bytes: int
    version: int = HELPER_VERSION


def load_manifest_apart(source: ColdSource, config: ManifestConfig, layout: str | None = None,
                        refresh: bool = False, timeout_s: float | None = None) -> tuple[Manifest, Path]:
    """The dataset's manifest, mapped from its cached file; listed and written by a helper process
    when there is no readable cached file (or ``refresh``).

    Args:
        source: The cold tier under the dataset prefix (its options travel to the helper).
        config: Manifest settings (``cache_dir``: where the file is written).
        layout: Layout override (see :func:`tierload.data.manifest.build_manifest`).
        refresh: List again even when a cached manifest exists.
        timeout_s: Seconds to wait for the helper (None: as long as the listing takes).

    Returns:
        ``(manifest, path)``: the mapped manifest and its file.

    Raises:
        ConfigError: Unknown layout.
        ManifestError: Nothing to read, or the helper ended without an answer (its stderr in
            the message).
        BackendError: The listing failed (unreachable endpoint, missing bucket ...).
    """
    path = cache_path(source, config, layout)
    if not refresh and path.is_file():
        try:
            return open_manifest(path), path
        except (OSError, ValueError, KeyError) as exc:  # ManifestError is a ValueError
            log.warning("cached manifest %s is unreadable (%s); listing again", path, exc)
    answer = run_helper(ManifestJob(source, config, layout), timeout_s)
    log.info("manifest of %s written by helper pid %d (peak RSS %.0f MB): %s", source.url, answer.pid,
             answer.peak_rss_bytes / 1e6, answer.path)
    assert answer.path is not None, "an answer without an error names its file"
    return open_manifest(answer.path), Path(answer.path)


def run_helper(job: ManifestJob, timeout_s: float | None = None) -> ManifestAnswer:
    """Run ``job`` in a child process and return its answer (re-raising the child's error).

    Raises:
        TierloadError: What the child raised (its own class, ``where`` naming the helper).
        ManifestError: The child ended without an answer, or ran past ``timeout_s``.
    """
    package_root = str(Path(__file__).resolve().parents[2])  # this tierload, whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    try:
        # subprocess.run kills the child on any exception here (Ctrl-C included) before re-raising.
        done = subprocess.run([sys.executable, "-m", __name__], input=pickle.dumps(job), capture_output=True,
                              env=env, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ManifestError(f"the manifest helper ran past timeout_s={timeout_s} listing {job.source.url}; "
                            "give it more time (a million keys take about a minute)", url=job.source.url) from None
    try:
        answer = pickle.loads(done.stdout)
    except Exception:  # noqa: BLE001 - anything unreadable means the child died before answering
        answer = None
    if not isinstance(answer, ManifestAnswer) or answer.version != HELPER_VERSION:
        tail = done.stderr.decode(errors="replace")[-STDERR_TAIL:]
        raise ManifestError(f"the manifest helper ({sys.executable} -m {__name__}) ended with exit code "
                            f"{done.returncode} and no answer; its stderr: {tail!r}", url=job.source.url)
    if answer.error is not None:
        raise answer.error
    return answer


def _peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _serve(job: ManifestJob) -> ManifestAnswer:
    """The child's side: build (or find) the file, and say where it is or what went wrong."""
    where = f"manifest helper (pid {os.getpid()})"
    if job.version != HELPER_VERSION:
        error: BaseException = ManifestError(f"a manifest job of version {job.version}, this helper reads "
                                             f"{HELPER_VERSION}: the caller and the helper are different tierloads")
        return ManifestAnswer(None, error, os.getpid(), _peak_rss_bytes())
    path = cache_path(job.source, job.config, job.layout)
    try:
        manifest = build_manifest(job.source, job.config, job.layout)
        release_freed_memory()  # the listing and the plan's temporaries, before the writer's buffers
        save_manifest(manifest, path)
    except TierloadError as exc:
        exc.where = exc.where or where
        exc.remote_traceback = exc.remote_traceback or traceback.format_exc()
        return ManifestAnswer(None, exc, os.getpid(), _peak_rss_bytes())
    except Exception as exc:  # noqa: BLE001 - crosses the boundary as a typed error with its traceback
        wrapped = ManifestError(f"{type(exc).__name__}: {exc}", url=job.source.url, where=where,
                                remote_traceback=traceback.format_exc())
        return ManifestAnswer(None, wrapped, os.getpid(), _peak_rss_bytes())
    return ManifestAnswer(str(path), None, os.getpid(), _peak_rss_bytes())


def main() -> int:
    """``python -m tierload.data.manifest_helper``: one pickled job on stdin, one answer on stdout."""
    logging.basicConfig(level=logging.WARNING, format="tierload manifest helper: %(message)s")
    job = pickle.loads(sys.stdin.buffer.read())
    answer = _serve(job)
    sys.stdout.buffer.write(pickle.dumps(answer))
    sys.stdout.buffer.flush()
    return 0 if answer.error is None else 1


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy's: the answer must pickle as
    # tierload.data.manifest_helper.ManifestAnswer, the class the caller knows.
    from tierload.data.manifest_helper import main as helper_main

    sys.exit(helper_main())
