"""The manifest of a ``file://`` prefix with packing off (one block per object), saved to OUT.

``python build_unpacked.py URL OUT``
"""

import sys
import time
from pathlib import Path

from tierload.config.loading import load_config
from tierload.config.models import ManifestConfig
from tierload.data.manifest import build_manifest, save_manifest
from tierload.stores.cold.source import ColdSource

url, out = sys.argv[1:3]
began = time.perf_counter()
manifest = build_manifest(ColdSource(url, load_config({}).cold), ManifestConfig(pack_target_bytes=0), layout="files")
save_manifest(manifest, Path(out))
print(f"{len(manifest.blocks):,} blocks, {manifest.num_packs} packs; {time.perf_counter() - began:.1f} s")
