"""The node cache and the coordinator do their I/O in ``start()``, never in their constructors."""

from __future__ import annotations

import os
import shutil
import tempfile

from tierload.config.loading import load_config
from tierload.coordinator.actor import Coordinator
from tierload.node.node_cache import NodeCache
from tierload.wire.api import CoordinatorAPI, LocalCaller
from tierload.wire.endpoint import ENDPOINT_FILE


def _ram_dirs() -> set[str]:
    """The RAM-level directories that exist now (where the hot tier puts its RAM level)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return {os.path.join(shm, name) for name in os.listdir(shm) if name.startswith("tierload-ram-")}


def test_constructors_touch_no_file_and_start_does(tmp_path):
    hot, warm = tmp_path / "hot", tmp_path / "warm"
    config = load_config({"hot": {"dir": str(hot), "ram_capacity_bytes": 2**20},
                          "warm": {"url": str(warm), "capacity_bytes": 2**20}})

    coordinator = Coordinator(config, node_alive=lambda: None)
    cache = NodeCache(config, node_id="node-a",
                      coordinator_call=LocalCaller(coordinator, CoordinatorAPI))
    socket = cache.endpoint().address
    assert not hot.exists() and not warm.exists()
    assert not os.path.exists(socket)
    ram_after_construction = _ram_dirs()  # compared below: other processes may add theirs meanwhile

    coordinator.start()
    assert warm.is_dir()
    cache.start()
    try:
        assert (hot / ENDPOINT_FILE).is_file()
        assert os.path.exists(socket)
        ram_level = cache.endpoint().hot_dirs[0]
        assert ram_level not in ram_after_construction and ram_level in _ram_dirs()
        cache.sync_now()  # the started cache reaches its coordinator
        assert coordinator.stats().nodes == {"node-a": 0}
    finally:
        cache.close()
        for ram_dir in cache.endpoint().hot_dirs[:-1]:  # the RAM level, outside tmp_path
            shutil.rmtree(ram_dir, ignore_errors=True)
