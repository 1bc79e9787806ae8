"""Shared fixtures: a real moto S3 server over HTTP, a real local Ray, real directories.

Nothing here mocks s3fs, Ray or the file system: tests talk to moto's server on 127.0.0.1
through s3fs, run actors on a local Ray started once per session, and use tmp_path dirs.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import sys

import pytest

from tierload.config.loading import load_config
from tierload_tools.s3local import LocalS3

logging.getLogger("werkzeug").setLevel(logging.ERROR)
# One OpenMP thread for torch here and in every process the tests start (set before any test module
# imports torch): the suite runs on 2 cores beside xdist workers, Ray and moto, where more threads
# spin-wait for cores rather than help. tests/test_demo.py (cpuacct, two runs each): 41.8, 46.3 -> 33.0, 39.6 CPU-s.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Metrics off in every dataset and Ray the tests start, unless a test asks for them: a Ray started
# with metrics runs the full metrics agent and collects its own and the actors' metrics, and the actors
# export theirs every few seconds. The tests of metrics and of Ray's footprint (test_metrics.py,
# test_local_ray_footprint.py, test_hardness_service_join.py's rank metrics, the open-files limit in
# test_hardness_open_files.py, test_demo.py's README command) ask for them: the default is tested where
# it shows.
os.environ.setdefault("TIERLOAD_METRICS__ENABLED", "false")
_bucket_ids = itertools.count()
pytest_plugins = ["store_fixtures"]  # the GCS, Azure and HTTP servers


@pytest.fixture(scope="session")
def s3():
    """moto's S3 server on 127.0.0.1 (a child process), for the whole session."""
    with LocalS3() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _test_logs(tmp_path_factory):
    """Where test-only helpers log, set before anything starts: the session's own directories, never a
    fixed /tmp path. A test that reads a log needs no Ray fixture to have run before it."""
    os.environ.setdefault("TIERLOAD_TEST_DNS_GUARD_LOG", str(tmp_path_factory.mktemp("dns-guard") / "events.jsonl"))
    # tests/rotating_credentials.py logs its calls here.
    os.environ.setdefault("TIERLOAD_TEST_CREDENTIALS_LOG", str(tmp_path_factory.mktemp("credentials") / "calls.log"))


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory):
    """One local Ray for the session, bound to 127.0.0.1, 2 CPUs, no dashboard.

    Every Ray worker and every process started later with this environment refuses to resolve
    amazonaws.com names, and logs any attempt (tests/dns_guard.py, installed by
    tests/sitecustomize.py; case B07).
    """
    import ray

    # Actors import test-only helpers (e.g. a rotating credential provider) from tests/.
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import ensure_ray

    # Started as a job starts tierload's own local Ray (one node on loopback; no API server,
    # autoscaler monitor or idle workers): one such Ray per xdist worker idles the whole session,
    # and a job on it without a warm tier runs no coordinator, as a user's would. Metrics stay on,
    # as by default: tests/test_metrics.py scrapes this Ray's Prometheus endpoint. No log monitor:
    # nothing here reads the workers' output, and it used 11-16 CPU-s per xdist worker's Ray in a
    # full suite (2026-12-02). Measured (cpuacct, start + one actor + shutdown): 8.9 CPU-s -> 5.9,
    # idle 0.077 -> 0.033 CPU-s per second.
    ensure_ray(load_config({"ray": {"num_cpus": 2, "object_store_memory_bytes": 200 * 2**20},
                            "metrics": {"enabled": True}}, environ={}), log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def bucket(s3):
    """A fresh, empty bucket: ``(name, s3fs filesystem)``."""
    name = f"test-{os.getpid()}-{next(_bucket_ids)}"
    fs = s3.create_bucket(name)
    return name, fs


def _tiers_under(root, hot="64MiB", warm="64MiB", **sections):
    """A config whose tiers and manifest cache live under ``root`` (see ``tier_config``)."""
    data = {
        "hot": {"dir": str(root / "hot"), "capacity_bytes": hot},
        "warm": {"url": str(root / "warm") if warm is not None else None,
                 "capacity_bytes": warm if warm is not None else 0},
        # One block per object, as these tests count blocks per object; tests/test_packs.py
        # turns packs on (the library's default) with manifest={"pack_target_bytes": ...}.
        "manifest": {"cache_dir": str(root / "manifests"), "pack_target_bytes": 0},
    }
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return load_config(data)


@pytest.fixture
def tier_config(tmp_path):
    """Factory for a config whose tiers and manifest cache live under this test's tmp_path.

    The warm tier is on by default, as in the library's defaults. A test that does not look at it
    (a layout's decoding, an error at start) passes ``warm=None``: on the session's Ray a job
    without a warm tier runs no coordinator, one Ray worker fewer to start (six files that do:
    165.5-168.4 -> 142.5-144.3 CPU-s, 2026-12-03)."""
    def make(hot="64MiB", warm="64MiB", **sections):
        return _tiers_under(tmp_path, hot, warm, **sections)
    return make


@pytest.fixture
def make_dataset(s3, ray_session):
    """Factory for TieredDataset on the test S3; stops the actors it started at teardown."""
    from tierload.deploy.runtime import stop_actors
    from tierload.loader.dataset import TieredDataset

    configs = []

    def make(url, config, **kwargs):
        kwargs.setdefault("storage_options", s3.storage_options)
        dataset = TieredDataset(url, config, **kwargs)
        configs.append(dataset.config)
        return dataset

    yield make
    for config in {id(c): c for c in configs}.values():
        stop_actors(config)


@pytest.fixture(scope="module")
def module_tier_config(ray_session, tmp_path_factory):
    """Factory like ``tier_config`` whose tier directories the whole test module shares: the same tier
    sizes (and the same sections other than ``manifest`` and ``cold``) name the same directories, so the
    same deployment (node cache and coordinator actors, ~1.5 CPU-s of actor start-up each time, measured
    on tests/test_dataset.py). ``manifest`` and ``cold`` may differ per call: they travel with each
    dataset's own registration, as jobs with their own settings share a node's cache. For tests that
    read their own fresh objects and assert per dataset (its samples, ``epoch_stats``); a test that needs
    empty tiers, or looks at node-wide figures (``cache_stats``), keeps its own ``tier_config``. The
    deployments are stopped at the module's end."""
    from tierload.deploy.runtime import stop_actors

    deployments = {}  # tier settings -> (their root, a config that names the deployment, to stop it)

    def make(hot="64MiB", warm="64MiB", **sections):
        tiers = repr((hot, warm, sorted((k, v) for k, v in sections.items() if k not in ("manifest", "cold"))))
        if tiers not in deployments:
            root = tmp_path_factory.mktemp("module-tiers")
            deployments[tiers] = (root, _tiers_under(root, hot, warm, **sections))
        return _tiers_under(deployments[tiers][0], hot, warm, **sections)

    yield make
    for _, config in deployments.values():
        stop_actors(config)


@pytest.fixture(scope="module")
def module_dataset(s3):
    """Factory for TieredDataset on the test S3 that leaves its deployment running: for configs from
    ``module_tier_config``, whose deployments end with the module."""
    from tierload.loader.dataset import TieredDataset

    def make(url, config, **kwargs):
        kwargs.setdefault("storage_options", s3.storage_options)
        return TieredDataset(url, config, **kwargs)

    return make


@pytest.fixture
def faulty_s3(s3):
    """The fault-injecting proxy (tests/faulty_s3.py) in front of the session's moto server.

    Point a dataset or source at ``faulty_s3.endpoint_url``; break requests through
    ``faulty_s3.faults`` (S3 errors, SlowDown, stalls, truncated bodies, a random
    :class:`faulty_s3.FaultMix`, credentials) or ``faulty_s3.refuse_connections_for(seconds)``;
    count what arrived in ``faulty_s3.faults.gets`` / ``access_keys``.
    """
    from faulty_s3 import FaultyS3

    with FaultyS3(s3.endpoint_url) as proxy:
        yield proxy


# ------------------------------------------------- the compiled simulator, compiled beside the tests
# Numba compiles the simulator's replay once per machine (cache=True), ~1 CPU-minute, almost all
# of it in the first test that runs it; on a fresh clone (CI) that is every run. A test module
# that runs the compiled engine asks for ``compiled_simulator``: if the session selected any such
# test, another process compiles (fills numba's on-disk cache) from the end of collection on,
# beside the tests before them (Ray and S3 tests often leave a core idle), and the first of them
# waits for what is left of it instead of compiling all of it itself. Not niced: a first test
# that waits for a starved compile would outlast its timeout on a loaded machine.
# Every xdist worker collects every test, so each would start a compile of the same functions:
# the compiles take turns on a lock beside numba's cache, and all but the first load what it wrote.
_compile_process = pytest.StashKey[subprocess.Popen]()
_COMPILE = """
import fcntl, pathlib, tierload.simulator.fast as fast
cache = pathlib.Path(fast.__file__).parent / "__pycache__"
cache.mkdir(exist_ok=True)
with open(cache / ".tests-compile.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    fast.warm_up()
"""


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    if any("compiled_simulator" in getattr(item, "fixturenames", ()) for item in session.items):
        session.stash[_compile_process] = subprocess.Popen(
            [sys.executable, "-c", _COMPILE], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)


def pytest_sessionfinish(session):
    process = session.stash.get(_compile_process, None)
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def compiled_simulator(request):
    """Waits for the background compile of the simulator (above) to end, so the test loads the
    compiled functions from numba's cache. If that compile failed or outlasts 10 minutes, the
    test compiles them itself (and reports any compile error there)."""
    process = request.session.stash.get(_compile_process, None)
    if process is not None:
        try:
            process.wait(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
