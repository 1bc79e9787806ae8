"""A training process without Ray reads through its service host (issue 25, item 1).

Real jobs in their own processes (``service_host_job.py``), each without Ray, against moto's S3
over HTTP: tierload's service host (``tierload.deploy.host``, ``host_process``) starts a local
Ray and the node cache for the job, under a private ``RAY_TMPDIR``. The host is then killed for real (SIGKILL),
and a start that fails must let its host go. The host's request and answer are also checked
without any process around them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import psutil
import pytest
from helpers import put_indexed_objects

from tierload.deploy.host_process import serve
from tierload.errors import MessageError
from tierload.wire.messages import CacheRequest

JOB = Path(__file__).resolve().parent / "service_host_job.py"
COUNT, SIZE = 16, 3000


@pytest.fixture
def ray_tmp():
    """A short private RAY_TMPDIR (Ray's socket paths must stay under 107 bytes)."""
    path = tempfile.mkdtemp(prefix="tlh")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


def _spec(s3, bucket, tmp_path: Path) -> dict:
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/d", COUNT, size=SIZE)
    config = {"hot": {"dir": str(tmp_path / "hot"), "capacity_bytes": "16MiB"},
              "warm": {"url": None, "capacity_bytes": 0},
              "manifest": {"cache_dir": str(tmp_path / "manifests"), "pack_target_bytes": 0},
              "ray": {"num_cpus": 1, "object_store_memory_bytes": 100 * 2**20}}
    return {"url": f"s3://{name}/d", "missing_url": f"s3://{name}/nothing-here", "size": SIZE,
            "storage_options": s3.storage_options, "config": config}


def _run(mode: str, spec: dict, ray_tmp: Path) -> tuple[dict[str, dict], str]:
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, str(JOB), mode, json.dumps(spec)], capture_output=True, text=True,
                          env=env, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    # The host ended when asked (its socket closed), not after the exit hook's wait and a SIGTERM.
    assert "did not end within" not in done.stderr, done.stderr[-3000:]
    events = {event["event"]: event for event in (json.loads(line) for line in done.stdout.splitlines()
                                                   if line.startswith("{"))}
    return events, done.stderr


def _left_running(pids: list[int], wait_s: float = 30.0) -> list[str]:
    """The processes of ``pids`` still running after up to ``wait_s`` seconds (zombies count as ended)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for pid in pids:
            try:
                process = psutil.Process(pid)
                if process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{pid} {' '.join(process.cmdline())[:120]}")
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _every_sample_once(epoch: dict) -> None:
    assert epoch["seen"] == list(range(COUNT)) and epoch["wrong"] == 0, epoch


def test_a_process_without_ray_reads_through_its_host_and_leaves_nothing_running(s3, bucket, tmp_path, ray_tmp):
    events, stderr = _run("read", _spec(s3, bucket, tmp_path), ray_tmp)
    _every_sample_once(events["epoch"])
    done = events["done"]
    assert done["ray_imported"] is False, "the training process imported Ray"
    assert done["through_worker"] == 4, done
    assert done["states"] == ["owned"], done
    assert done["cache"] in done["processes"], done  # the cache runs under the host: its own, not another job's
    # The host ran Ray under it: its GCS, its raylet and the node cache's worker.
    names = " ".join(psutil.Process(pid).name() for pid in done["processes"] if psutil.pid_exists(pid))
    assert len(done["processes"]) >= 3, (done, names)
    assert _left_running([done["host"], *done["processes"]]) == [], stderr[-3000:]


def test_a_killed_host_is_started_again_and_no_epoch_loses_a_sample(s3, bucket, tmp_path, ray_tmp):
    events, stderr = _run("kill", _spec(s3, bucket, tmp_path), ray_tmp)
    _every_sample_once(events["epoch"])
    done = events["done"]
    assert events["killed"]["returncode"] == -9, events["killed"]
    # While the cache is gone readers read the blocks themselves; then a new host starts it again.
    _every_sample_once(done["during"])
    assert done["back"] is True, stderr[-3000:]
    _every_sample_once(done["after"])
    assert done["host"] != events["killed"]["host"], (events, stderr[-3000:])
    assert "was gone; it runs again" in stderr, stderr[-3000:]
    assert done["ray_imported"] is False
    assert _left_running([events["killed"]["cache"], done["host"], *done["processes"]]) == [], stderr[-3000:]


def test_a_start_that_fails_lets_its_host_go(s3, bucket, tmp_path, ray_tmp):
    events, stderr = _run("missing", _spec(s3, bucket, tmp_path), ray_tmp)
    refused = events["refused"]
    assert refused["error"] == "ManifestError", refused  # no objects under the prefix
    assert refused["host_connected"] is False and refused["let_go"] is not None, refused
    assert events["done"]["host_ended"] is True, stderr[-3000:]


# ---------------------------------------------------------------- the request and answer, without processes
def _serving() -> tuple[Connection, threading.Thread]:
    ours, theirs = socket.socketpair()
    server = threading.Thread(target=serve, args=(Connection(theirs.detach()),), daemon=True)
    server.start()
    return Connection(ours.detach()), server


def test_a_request_of_another_version_is_answered_with_a_typed_error():
    connection, server = _serving()
    connection.send(CacheRequest(1, {}, version=CacheRequest.VERSION + 1))
    answer = connection.recv()
    assert answer.endpoint is None and isinstance(answer.error, MessageError)
    assert f"version {CacheRequest.VERSION + 1} received" in str(answer.error)
    connection.send("not a request")
    answer = connection.recv()
    assert isinstance(answer.error, MessageError) and "got str" in str(answer.error)
    connection.close()
    server.join(10)
    assert not server.is_alive(), "the host did not end when the training process's end closed"


def test_a_bad_configuration_comes_back_as_the_error_it_raised():
    connection, server = _serving()
    connection.send(CacheRequest(7, {"hot": {"capacity_bytes": "lots"}}))
    answer = connection.recv()
    assert answer.request_id == 7, answer  # an answer names its request: a caller drops one to an earlier request
    assert answer.endpoint is None and type(answer.error).__name__ == "ConfigError", answer
    assert "lots" in str(answer.error)
    connection.close()
    server.join(10)


def test_a_thread_asking_for_ray_while_another_imports_it_is_told_no():
    """The keeper's thread asks ``ray_connected()`` once a second; a user's ``import ray`` in the main
    thread meanwhile leaves a module without its names in ``sys.modules`` for a moment (seen as an
    AttributeError that ended the keeper's thread, in the startup bench)."""
    probe = ("import sys, types; sys.modules['ray'] = types.ModuleType('ray'); "
             "from tierload.ray_presence import ray_connected; print(ray_connected())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False"]
