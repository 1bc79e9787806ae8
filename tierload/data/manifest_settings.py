"""The manifest settings a dataset is planned with: ``manifest.*``, with packs sized to the hot tier."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierload.config.models import ManifestConfig, TierloadConfig

log = logging.getLogger(__name__)

# A pack is the hot tier's unit of admission: a tier that holds only a few packs can keep
# neither the prefetch window nor what the next epoch reads again. So a pack is never larger
# than this fraction of the hot tier's disk level, whatever manifest.pack_target_bytes says.
PACKS_PER_HOT_TIER = 16


def manifest_settings(config: TierloadConfig) -> ManifestConfig:
    """The manifest settings a dataset is planned with: ``config.manifest``, with
    ``pack_target_bytes`` lowered to ``hot.capacity_bytes // PACKS_PER_HOT_TIER`` when it is larger
    and there is a hot tier
    (the live dataset and ``tierload policy simulate`` both plan through this, so they see the
    same blocks).

    Returns:
        ``config.manifest`` itself, or a copy with the lowered pack target (bytes).
    """
    manifest = config.manifest
    cap = config.hot.capacity_bytes // PACKS_PER_HOT_TIER
    if config.hot.capacity_bytes == 0 or manifest.pack_target_bytes <= cap:
        return manifest  # no hot tier (every read bypasses it), or packs that already fit
    log.info("packs of at most %d bytes (1/%d of the hot tier), not manifest.pack_target_bytes=%d",
             cap, PACKS_PER_HOT_TIER, manifest.pack_target_bytes)
    return manifest.model_copy(update={"pack_target_bytes": max(cap, 1)})
