"""What mapping a manifest costs the process that maps it: CPU seconds and RSS of ``open_manifest``,
then of the whole-manifest figures the dataset asks for at start (dataset id, total bytes, packs).

``python open_manifest_cost.py build URL MANIFEST`` writes an unpacked manifest (one block per
object: ``pack_target_bytes=0``) of a ``file://`` prefix; ``python open_manifest_cost.py open MANIFEST``
measures mapping it.
"""

from __future__ import annotations

import sys
import time


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def build(url: str, path: str) -> None:
    from pathlib import Path

    from tierload.config.loading import load_config
    from tierload.config.models import ManifestConfig
    from tierload.data.manifest import build_manifest, save_manifest
    from tierload.stores.cold.source import ColdSource

    manifest = build_manifest(ColdSource(url, load_config(None).cold), ManifestConfig(pack_target_bytes=0),
                              layout="files")
    save_manifest(manifest, Path(path))
    print(f"{len(manifest.blocks)} blocks, {manifest.num_packs} packs")


def open_(path: str) -> None:
    import torch  # noqa: F401 - as the training process

    from tierload.data.manifest import open_manifest

    rss, cpu = _rss_mb(), time.process_time()
    manifest = open_manifest(path)
    print(f"open_manifest: {time.process_time() - cpu:.2f} CPU-s, RSS +{_rss_mb() - rss:.0f} MB "
          f"({len(manifest.blocks)} blocks, {type(manifest.blocks).__name__})")
    cpu = time.process_time()
    figures = (manifest.dataset_id, manifest.total_bytes, manifest.num_packs)
    print(f"dataset_id, total_bytes, num_packs: {time.process_time() - cpu:.2f} CPU-s, RSS +{_rss_mb() - rss:.0f} MB "
          f"in all {figures}")


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3])
    else:
        open_(sys.argv[2])
