"""No litter (issue 13, item 7): the channel's socket lives in the private hot directory (or
Linux's abstract namespace when that path is too long); a clean shutdown removes the socket
and the endpoint file; a crashed cache's leftovers are cleared by the next one. Real sockets,
real processes, a real local Ray in a child process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

from tierload.config.loading import load_config
from tierload.node.node_cache import NodeCache
from tierload.wire.node_client import NodeCacheClient
from tierload.wire.endpoint import ENDPOINT_FILE, SOCKET_FILE, clear_stale_endpoint, publish_endpoint, read_endpoint
from tierload.wire.messages import Endpoint


def _cache(hot) -> NodeCache:
    return NodeCache(load_config({"hot": {"dir": str(hot)}, "warm": {"url": None}}), node_id="n1").start()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_socket_lives_in_the_hot_dir_and_close_removes_it_and_the_endpoint(tmp_path):
    hot = tmp_path / "hot"
    cache = _cache(hot)
    address = cache.endpoint().address
    assert address == str(hot / SOCKET_FILE) and os.path.exists(address)
    assert NodeCacheClient(address, cache.endpoint().authkey).ready() is True
    cache.close()
    assert not os.path.exists(address) and not (hot / ENDPOINT_FILE).exists()


def test_a_hot_dir_too_long_for_a_socket_path_uses_the_abstract_namespace(tmp_path):
    hot = tmp_path / ("d" * 60) / ("e" * 60)
    cache = _cache(hot)
    try:
        endpoint = cache.endpoint()
        assert endpoint.address.startswith("\0tierload-")
        assert read_endpoint(hot) == endpoint  # the NUL survives the JSON file
        client = NodeCacheClient(endpoint.address, endpoint.authkey)
        assert client.ready() is True
        client.close()
    finally:
        cache.close()
    assert not (hot / ENDPOINT_FILE).exists()


def test_a_crashed_caches_socket_and_endpoint_are_cleared_by_the_next_one(tmp_path):
    hot = tmp_path / "hot"
    hot.mkdir(mode=0o700)
    old_socket = tmp_path / "old.sock"  # where an older release put it, outside the hot dir
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(old_socket))
    listener.close()  # a killed process never unlinks its socket
    dead = _dead_pid()
    publish_endpoint(hot, Endpoint(str(old_socket), b"k" * 32, "n0", (str(hot),), dead))
    cache = _cache(hot)
    try:
        assert not old_socket.exists()
        assert read_endpoint(hot).pid == os.getpid()
    finally:
        cache.close()


def test_a_live_owners_endpoint_is_left_alone(tmp_path):
    publish_endpoint(tmp_path, Endpoint(str(tmp_path / "live.sock"), b"k" * 32, "n0", (str(tmp_path),), os.getpid()))
    assert clear_stale_endpoint(tmp_path) is None
    assert read_endpoint(tmp_path).pid == os.getpid()


_CHILD = textwrap.dedent("""
    import json, sys
    from tierload.deploy.runtime import node_endpoint
    from tierload.config.loading import load_config

    config = load_config({"hot": {"dir": sys.argv[1]}, "warm": {"url": None}, "ray": {"num_cpus": 1}},
                         environ={})
    print("RESULT " + json.dumps(node_endpoint(config).address))
""")  # and exits, stopping nothing itself


def test_a_job_that_exits_leaves_no_socket_and_no_endpoint(tmp_path):
    hot = tmp_path / "hot"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(hot)], capture_output=True, text=True, timeout=240,
                          env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    address = json.loads(line[len("RESULT "):])
    assert address == str(hot / SOCKET_FILE)
    assert not os.path.exists(address) and not (hot / ENDPOINT_FILE).exists()
