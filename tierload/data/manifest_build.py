"""Listing the cold prefix into a manifest, and the cached manifest file (listed once, then mapped).

Runs in the process that lists: the manifest helper forked by a training process
(:mod:`tierload.data.manifest_helper`), the CLI, the simulator. It loads pyarrow; a process that
only maps the file does not (:func:`tierload.data.manifest.open_manifest`).
"""

from __future__ import annotations

import logging
import os
import time

from tierload.arrow_values import from_numpy
from tierload.config.models import ManifestConfig
from tierload.data.layouts.registry import LAYOUTS, layout_spec
from tierload.data.manifest import Manifest, cache_path, open_manifest
from tierload.data.manifest_arrow import save_manifest
from tierload.errors import ManifestError
from tierload.process_memory import release_freed_memory
from tierload.stores.cold.listing import ObjectListing
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)


# URLs lower-cased at once by detect_layout (bounds its transient memory).
_DETECT_WINDOW = 65536


def detect_layout(objects: ObjectListing, config: ManifestConfig) -> str:
    """Pick the layout from what the listing holds (``manifest.layout: auto``)."""
    import pyarrow.compute as pc  # here: a process that only maps a manifest never loads it (~9 MB)

    suffixes = [spec.suffix for spec in LAYOUTS.values() if spec.suffix is not None]
    every = dict.fromkeys(suffixes, True)
    nonempty = False
    extension = False
    # A window of URLs at a time: lower-casing the whole listing at once would copy every URL.
    for lo in range(0, len(objects), _DETECT_WINDOW):
        sizes = objects.sizes[lo:lo + _DETECT_WINDOW]
        names = pc.utf8_lower(objects.urls.slice(lo, len(sizes)).filter(from_numpy(sizes > 0)))
        if not len(names):
            continue
        nonempty = True
        for suffix in suffixes:
            every[suffix] = every[suffix] and bool(pc.all(pc.ends_with(names, suffix)).as_py())
        extension = extension or any(bool(pc.any(pc.ends_with(names, e)).as_py()) for e in config.extensions)
    for spec in LAYOUTS.values():
        if nonempty and spec.suffix is not None and every[spec.suffix]:
            return spec.name
    return "imagefolder" if extension else "files"


def build_manifest(source: ColdSource, config: ManifestConfig, layout: str | None = None) -> Manifest:
    """List the cold prefix and describe the dataset.

    Args:
        source: The cold tier under the dataset prefix.
        config: Manifest settings.
        layout: Overrides ``config.layout``; a name in :data:`tierload.data.layouts.registry.LAYOUTS`, or
            ``auto``.

    Raises:
        ConfigError: Unknown layout (before anything is listed).
        ManifestError: Nothing to read.
        BackendError: The listing failed (unreachable endpoint, missing bucket ...).
    """
    chosen = layout or config.layout
    if chosen != "auto":
        layout_spec(chosen)  # a misspelt layout fails now, not after listing millions of keys
    objects = source.list_objects(exclude=tuple(config.exclude), spill_dir=os.path.expanduser(config.cache_dir))
    if len(objects) == 0:
        unreadable = f"; {len(objects.unreadable)} skipped: {objects.unreadable}" if objects.unreadable else ""
        raise ManifestError(f"the prefix holds no objects{unreadable}", tier="cold", url=source.url)
    if chosen == "auto":
        chosen = detect_layout(objects, config)
    plan = layout_spec(chosen).plan(source, objects, config)
    log.info("manifest of %s: %d objects -> %d blocks, %d samples (%s)", source.url, len(objects),
             len(plan.blocks), len(plan.sample_block), chosen)
    return Manifest(url=source.url, layout=chosen, blocks=plan.blocks, sample_block=plan.sample_block,
                    sample_index=plan.sample_index, labels=plan.labels, classes=plan.classes, extra=plan.extra,
                    skipped={**objects.unreadable, **plan.skipped}, created_at=time.time())


def load_manifest(source: ColdSource, config: ManifestConfig, layout: str | None = None,
                  refresh: bool = False) -> Manifest:
    """Return the cached manifest, or list the prefix and cache the result.

    Args:
        source: The cold tier under the dataset prefix.
        config: Manifest settings (``cache_dir``).
        layout: Layout override (see :func:`build_manifest`).
        refresh: List again even when a cached manifest exists.
    """
    path = cache_path(source, config, layout)
    if not refresh and path.is_file():
        try:
            return open_manifest(path)
        except (ValueError, KeyError, ManifestError) as exc:
            log.warning("cached manifest %s is unreadable (%s); listing again", path, exc)
    manifest = build_manifest(source, config, layout)
    release_freed_memory()  # the listing and the plan's temporaries
    save_manifest(manifest, path)
    del manifest
    release_freed_memory()
    # The mapped file replaces the listing's arrays: its pages are shared and only read when used.
    return open_manifest(path)
