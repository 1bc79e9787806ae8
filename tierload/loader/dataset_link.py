"""A dataset's calls to its node cache: registering the dataset, and joining an epoch's stream.

Registration sends the cached manifest file's path when the cache can map it (same node),
else the blocks themselves. Joining creates the stream from its plan when the cache does not
know it yet, registers the dataset again after a cache restart, and waits once (up to 30 s)
for a cache that went away: it restarts, or the process's keeper creates it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tierload.data.manifest import Manifest
from tierload.errors import ChannelLostError, ServiceError, StreamNotOpenError
from tierload.loader.consumer import NodeLink
from tierload.stores.cold.location import ColdLocation
from tierload.wire.messages import BlockTable, DatasetRegistration, SeededStreamPlan, StreamPlan

# Makes what creates a stream: its plan, or the seeds the node cache derives the plan from.
PlanMaker = Callable[[], "StreamPlan | SeededStreamPlan"]

# Seconds a join waits for a node cache that went away (restarting, or created again by the keeper).
REJOIN_WAIT_S = 30.0


def register_dataset(link: NodeLink, manifest: Manifest, manifest_path: Path | None, cold: ColdLocation) -> bool:
    """Make the dataset known to the node cache behind ``link``, and this job admitted to it.

    Sent even when the cache knows the dataset (another job registered it): the cache checks this
    job's right to read with ``cold``'s credentials and reads for its streams with them
    (:mod:`tierload.node.access`); then only the location travels, not the blocks.

    Args:
        link: The node cache.
        manifest: The dataset's manifest.
        manifest_path: Its cached file on this node (the cache maps it), or None.
        cold: The dataset's cold location, with this job's credentials.

    Returns:
        True if the cache mapped the manifest file (it can derive the streams' plans from
        seeds, :class:`~tierload.wire.messages.SeededStreamPlan`); False if the blocks were sent.

    Raises:
        AccessDeniedError: The cold tier refused this job's credentials on the dataset.
    """
    by_file = DatasetRegistration(manifest.dataset_id, cold, BlockTable.of([]), manifest_path=str(manifest_path))
    if manifest_path is not None and link.call(lambda cache: cache.register_dataset(by_file)):
        return True  # the cache mapped the same manifest file
    by_blocks = DatasetRegistration(manifest.dataset_id, cold, BlockTable.of(manifest.blocks))
    link.call(lambda cache: cache.register_dataset(by_blocks))
    return False


def join_stream(link: NodeLink, stream_id: str, worker: int, workers: int, plan: PlanMaker,
                register: Callable[[NodeLink], None]) -> None:
    """Join this iteration's stream on the node cache, creating it (and registering the dataset,
    after a cache restart) when needed.

    Args:
        link: The node cache.
        stream_id: The iteration's stream.
        worker, workers: This DataLoader worker and how many the rank has.
        plan: Builds the stream's plan (called only when the stream must be created).
        register: Registers the dataset on ``link`` (:func:`register_dataset`).

    Raises:
        ChannelLostError: The cache went away and did not come back within :data:`REJOIN_WAIT_S`.
        ServiceError: The cache refused the stream.
    """
    try:
        _join_once(link, stream_id, worker, workers, plan, register)
    except ChannelLostError:
        if not link.reconnect(wait_s=REJOIN_WAIT_S):
            raise
        _join_once(link, stream_id, worker, workers, plan, register)


def _join_once(link: NodeLink, stream_id: str, worker: int, workers: int, plan: PlanMaker,
               register: Callable[[NodeLink], None]) -> None:
    if link.call(lambda cache: cache.open_stream(stream_id, worker, workers, identity=link.identity),
                 wait_s=REJOIN_WAIT_S):
        return
    try:
        link.call(lambda cache: cache.open_stream(stream_id, worker, workers, plan()))
    except (StreamNotOpenError, ChannelLostError):
        raise
    except ServiceError:
        register(link)  # the node cache restarted and forgot the dataset
        link.call(lambda cache: cache.open_stream(stream_id, worker, workers, plan()))
