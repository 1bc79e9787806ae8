"""The node cache's cost of registering a dataset of many blocks: RSS and seconds.

An in-process ``NodeCache`` (no Ray; its own hot directory) registers the cached manifest file
MANIFEST by path, as a training process on its node does, then a second dataset id is not needed:
the figures are the cache's RSS before and after, the call's wall and CPU seconds, and how long
the cache's lock was held meanwhile (a probe thread times ``has_dataset`` calls, which take it).

``python register_cost.py MANIFEST_FILE DATASET_URL HOT_DIR``
"""

from __future__ import annotations

import sys
import threading
import time


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(manifest_file: str, url: str, hot_dir: str) -> None:
    from tierload.config.loading import load_config
    from tierload.data.manifest import open_manifest
    from tierload.node.node_cache import NodeCache
    from tierload.stores.cold.location import ColdLocation
    from tierload.wire.messages import BlockTable, DatasetRegistration

    dataset_id = open_manifest(manifest_file).dataset_id
    cache = NodeCache(load_config({"hot": {"dir": hot_dir}, "warm": {"url": None}}), node_id="probe").start()
    waits: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            cache.has_dataset("none")
            waits.append(time.perf_counter() - began)
            time.sleep(0.01)

    try:
        before = _rss_mb()
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        began, cpu = time.perf_counter(), time.process_time()
        ok = cache.register_dataset(DatasetRegistration(dataset_id, ColdLocation(url), BlockTable.of([]),
                                                        manifest_path=manifest_file))
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        stop.set()
        prober.join()
        print(f"blocks {cache._catalog.num_blocks(dataset_id):,}: registered {ok}; {wall:.2f} s wall, {cpu:.2f} CPU-s; "
              f"RSS {before:.0f} -> {_rss_mb():.0f} MB (+{_rss_mb() - before:.0f}); longest lock wait of a "
              f"concurrent call {max(waits):.2f} s")
    finally:
        cache.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
