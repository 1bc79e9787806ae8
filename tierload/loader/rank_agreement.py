"""Every rank of a ``torch.distributed`` job trains on one manifest, or the job stops at the start.

Each rank loads its manifest from its own cache (one per node) or lists the prefix itself, so two
ranks can hold different listings: one listed before an object was added, the other after, or one
reused yesterday's cached listing. Their epoch orders would then cut different sample lists: samples
read twice or never, ``len()`` unequal, and a rank with an extra batch waiting forever in a
collective. :func:`check_ranks_agree` compares a digest of every rank's manifest (one small
``all_gather_object``) and raises on every rank alike, so no rank is left waiting.

Without a process group there is nothing to compare with: ranks given as ``rank=`` /
``world_size=`` agree only if their listings do (a shared ``manifest.cache_dir``, or one cached
manifest copied to every node's); nothing checks it. A saved state's ``dataset_id`` still refuses
to resume on a different listing.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import TYPE_CHECKING, Any

from tierload.errors import ManifestMismatchError

if TYPE_CHECKING:
    from tierload.data.manifest import Manifest

log = logging.getLogger(__name__)


def listing_summary(manifest: Manifest) -> dict[str, Any]:
    """What a rank says about its manifest: its digest (``dataset_id``), sizes, when and where it was listed."""
    return {"dataset_id": manifest.dataset_id, "samples": manifest.num_samples, "blocks": len(manifest.blocks),
            "listed_at": manifest.created_at, "host": socket.gethostname()}


def _describe(rank: int, summary: dict[str, Any]) -> str:
    listed = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(summary["listed_at"])))
    return (f"rank {rank} on {summary['host']}: {summary['samples']} samples in {summary['blocks']} blocks, "
            f"manifest {summary['dataset_id']} listed at {listed}")


def check_ranks_agree(manifest: Manifest, url: str, world_size: int | None = None) -> bool:
    """Compare this rank's manifest with every other rank's in the default process group.

    A collective: every rank of the group must call it (``TieredDataset.start`` does, on every rank
    that builds the dataset). Skipped (returns False) without an initialised process group, with a
    group of one, or when ``world_size`` (the dataset's explicit one) is not the group's: a dataset
    only some ranks build (e.g. ``rank=0, world_size=1`` for evaluation) must not enter a collective
    the others never join.

    Args:
        manifest: This rank's manifest.
        url: The dataset prefix (named in the error).
        world_size: The dataset's explicit world size, or None (the group's).

    Returns:
        True when every rank of the group holds the same manifest; False when nothing was compared.

    Raises:
        ManifestMismatchError: The ranks hold different manifests; raised on every rank, naming each listing.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    group_size = dist.get_world_size()
    if group_size < 2 or (world_size is not None and world_size != group_size):
        return False
    summaries: list[Any] = [None] * group_size
    dist.all_gather_object(summaries, listing_summary(manifest))
    if len({summary["dataset_id"] for summary in summaries}) == 1:
        log.debug("all %d ranks hold manifest %s of %s", group_size, manifest.dataset_id, url)
        return True
    rows = "; ".join(_describe(rank, summary) for rank, summary in enumerate(summaries))
    raise ManifestMismatchError(
        f"the ranks of this job hold different manifests of the dataset ({rows}): their epoch orders would "
        "read some samples twice and others never. The prefix changed between listings, or a node reused an "
        "older cached listing: give every rank one listing (a manifest.cache_dir all nodes share), or start "
        "again with TieredDataset(refresh_manifest=True) on every rank once the prefix no longer changes",
        url=url)
