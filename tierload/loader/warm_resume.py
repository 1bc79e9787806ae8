"""Warm resume: the node cache fetches a resumed rank's first blocks before the first step.

Between ``load_state_dict`` and the first batch a job restores its model and optimizer, builds
its DataLoader and starts its workers: seconds to minutes in which the data path would idle.
:func:`open_warm_stream` opens a short stream on the node cache over the first
``prefetch.depth_blocks`` runs of the rank's remaining order (no look-ahead, so it leaves no
ghost behind), and the cache's prefetch loop fetches them at once. When the epoch's own stream
opens (with however many DataLoader workers the loader has, which is not known at load time),
:func:`close_warm_stream` closes the warm one: the blocks are hot by then, or in flight, and
the epoch's stream pins them as it schedules its first runs.

The warm stream's fetches are counted on its own stream row (its id ends in ``.warm``).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from tierload.data.runs import plan_runs
from tierload.errors import ChannelLostError, ServiceError
from tierload.loader.consumer import NodeLink
from tierload.wire.messages import StreamPlan

log = logging.getLogger(__name__)

WARM_SUFFIX = ".warm"


def warm_plan(plan: StreamPlan, depth_blocks: int) -> StreamPlan:
    """The first ``depth_blocks`` runs of ``plan``'s consumed part, as a plan of its own.

    Args:
        plan: The rank's plan for the rest of the epoch (``start`` is ignored: the warm plan
            begins at the plan's first remaining position, ``plan.start``).
        depth_blocks: Runs to fetch ahead (``prefetch.depth_blocks``; at least 1 is kept).

    Returns:
        A plan of those positions only: ``consume_len == len(seq)``, no look-ahead, no lineage.
    """
    seq = plan.seq[plan.start:plan.consume_len]
    run_start = plan_runs(seq, plan.reuse_gap)[0]
    depth = max(1, int(depth_blocks))
    end = int(run_start[depth]) if len(run_start) > depth else len(seq)
    return replace(plan, seq=seq[:end], consume_len=end, start=0, lineage="")


def open_warm_stream(link: NodeLink, stream_id: str, plan: StreamPlan, depth_blocks: int) -> str | None:
    """Open the warm stream ``stream_id`` over the first runs of ``plan`` (see :func:`warm_plan`).

    Returns:
        ``stream_id``, or None when there is nothing to fetch or no node cache answered (a warm
        resume is an optimisation: the epoch starts cold then, never fails).
    """
    warm = warm_plan(plan, depth_blocks)
    if not warm.consume_len:
        return None
    try:
        link.call(lambda cache: cache.open_stream(stream_id, 0, 1, warm))
    except (ChannelLostError, ServiceError) as exc:
        log.warning("warm resume skipped: the node cache did not take stream %s (%s)", stream_id, exc)
        return None
    log.info("warm resume: the node cache fetches the first %d positions (%d blocks at most) of %s", warm.consume_len,
             depth_blocks, stream_id)
    return stream_id


def close_warm_stream(link: NodeLink, stream_id: str) -> None:
    """Close the warm stream (a no-op when it closed already, expired or the cache restarted)."""
    link.notify(lambda cache: cache.close_consumer(stream_id, 0, link.identity))
