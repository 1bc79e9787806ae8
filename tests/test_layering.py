"""Layers that must stay apart: the simulator replays the pure policies and run arithmetic,
never the live node cache (issue 10, item 6), not even through a module it imports."""

from __future__ import annotations

import json
import subprocess
import sys

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
import tierload.simulator as root
names = [root.__name__] + [info.name for info in pkgutil.walk_packages(root.__path__, root.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(sys.modules)}))
"""


def test_no_simulator_module_imports_the_node_cache_even_transitively():
    # A fresh interpreter: this session has imported tierload.cache long ago.
    done = subprocess.run([sys.executable, "-c", _IMPORT_ALL], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert "tierload.simulator.run" in result["imported"] and "tierload.simulator.fast" in result["imported"]
    assert "tierload.runs" in result["loaded"]  # the run arithmetic it shares with the node cache
    cache_modules = [name for name in result["loaded"] if name.split(".")[:2] == ["tierload", "cache"]]
    assert cache_modules == [], f"the simulator imports {cache_modules}"
