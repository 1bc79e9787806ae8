"""The embedded local Ray listens on loopback only (issue 13, item 4).

A child process starts tierload's own local Ray exactly as a training job does (no cluster
configured), with the coordinator and a node cache actor on it, and lists the listening
TCP sockets of every process it started (psutil); none may listen on another address.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import textwrap

import pytest

psutil = pytest.importorskip("psutil")

_CHILD = textwrap.dedent("""
    import json, sys
    import psutil, ray
    from tierload.deploy.runtime import node_endpoint, stop_actors
    from tierload.config.loading import load_config

    config = load_config({"hot": {"dir": sys.argv[1]}, "warm": {"url": None}, "ray": {"num_cpus": 1}},
                         environ={})
    node_endpoint(config)  # starts the local Ray, the coordinator and this node's cache actor
    listening = []
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            listening += [(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                          if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            pass
    names = [proc.name() for proc in psutil.Process().children(recursive=True)]
    print("RESULT " + json.dumps({"listening": listening, "processes": names}))
    stop_actors(config)
    ray.shutdown()
""")


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_the_embedded_ray_listens_on_loopback_only(tmp_path):
    """Case F06: every socket the embedded Ray's processes listen on is a loopback address"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TIERLOAD_RAY__ADDRESS")}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "hot")], capture_output=True, text=True,
                          timeout=240, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    found = json.loads(line[len("RESULT "):])
    names = " ".join(found["processes"])
    assert "gcs_server" in names and "raylet" in names  # the Ray processes were seen
    servers = {name for name, _, _ in found["listening"]}
    assert {"gcs_server", "raylet"} <= servers, found["listening"]
    exposed = [entry for entry in found["listening"] if not _loopback(entry[1])]
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"
