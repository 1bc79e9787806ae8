"""A node cache's reads of one sample outside any stream (``ds[i]``, a map-style DataLoader).

A sample's block is looked for in the order of the tiers: the hot tier (the consumer reads the
file itself), a fetch already on its way (waited for, never read twice), then a peer's hot
tier and the warm tier, then cold. The whole block goes through the fetcher's single flight,
which places it in the hot tier by policy as a planned fetch would. A pack member whose layout
decodes a member alone is read by itself instead: cut from a peer's or the warm tier's copy of
the pack when one holds it (the copy is not admitted to the hot tier), else by one ranged
request of just its bytes (the pack is not read from cold for one member).

Every read is one access of its block for the counts and policies (a block earns its admission
to the hot tier as a planned one does), counted in the node's counters with its source
(``hot_hits``, ``staged_hits``, ``peer_hits``, ``warm_hits``, ``cold_misses``; ``cold_gets`` and ``cold_bytes`` as
for any cold read), plus ``random_reads``; it belongs to no stream, so no epoch's stats count it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from tierload.config.models import TierloadConfig
from tierload.data.blocks import Block
from tierload.errors import ServiceError
from tierload.frames.blockfile import FrameFormat, encode_frame
from tierload.node.accounting import NodeAccounting
from tierload.node.catalog import BlockCatalog
from tierload.node.fetcher import ACQUIRE_TIMEOUT_S, Fetcher
from tierload.node.hot_tier import HotTier
from tierload.policies.counts import PinCounts
from tierload.wire.messages import HotBlock, MemberFrame, SampleRead, WireBlock, member_key


class SampleReads:
    """Serves :meth:`~tierload.wire.api.NodeCacheAPI.read_sample` over the node cache's parts.

    Args:
        config: The node cache's configuration (``wire`` frames the answers).
        cond: The node cache's condition (the one lock).
        catalog, hot, fetcher, pins, accounting: The node cache's parts.
    """

    def __init__(self, config: TierloadConfig, cond: threading.Condition, catalog: BlockCatalog, hot: HotTier,
                 fetcher: Fetcher, pins: PinCounts, accounting: NodeAccounting) -> None:
        self.config = config
        self._cond = cond
        self._catalog = catalog
        self._hot = hot
        self._fetcher = fetcher
        self._pins = pins
        self._accounting = accounting
        self.secret: bytes | None = None  # the deployment's checksum key, set by the owner's start()

    def read(self, request: SampleRead) -> HotBlock | WireBlock | MemberFrame:
        """The sample's block (or pack member) from the fastest tier that holds it.

        Returns:
            :class:`HotBlock` (read the block's file), :class:`WireBlock` (the whole block's
            frame) or :class:`MemberFrame` (the member's bytes alone, framed under
            :func:`~tierload.wire.messages.member_key`).

        Raises:
            MessageError: ``request`` is not a :class:`SampleRead` of this release.
            ServiceError: The block is not one of the registered dataset's, or no fetch ended in time.
            TierloadError: The fetch or cold read failed (e.g. SourceChangedError).
        """
        request = SampleRead.received(request)
        deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
        with self._cond:
            block = self._catalog.block(request.key)
            if request.dataset_id not in self._catalog or block is None:
                raise ServiceError(f"block {request.key} of dataset {request.dataset_id} is not registered on this "
                                   "node cache; register the dataset first")
            member = request.member if block.members is not None else None
            if member is not None and not 0 <= member < len(block.members or ()):
                raise ServiceError(f"member {member} of block {request.key}: the pack has {len(block.members or ())}")
            self._accounting.count_unplanned_access(request.key)  # before a fetch asks the hot tier to admit it
            level = self._hot.level_of(request.key)
            if level is not None:
                self._count(Counter(hot_hits=1))
                return HotBlock(level)
            readers = self._catalog.readers_of(request.dataset_id, request.identity)
            if member is None or self._fetcher.busy_with(request.key):
                return self._whole(block, member, deadline, readers)
        return self._member_alone(block, member, readers)

    # ----------------------------------------------------------------- the two paths
    def _whole(self, block: Block, member: int | None, deadline: float,
               readers: dict[str, str]) -> HotBlock | WireBlock | MemberFrame:
        """The block through the fetcher's single flight (call under the lock): a fetch already
        on its way is waited for; else one is started whose source is counted, read from cold
        with ``readers``' credentials."""
        key = block.key
        waits_for_another = self._fetcher.busy_with(key)
        self._pins.pin(key)  # staged, not dropped, if the hot tier refuses it
        try:
            if not waits_for_another:
                self._fetcher.submit(key, None, counted=True, readers=readers)
            found = self._fetcher.wait_for(key, None, deadline)
        finally:
            self._fetcher.release(key)
        if not waits_for_another:
            self._count(Counter())  # the fetch this read started counts its source
        else:  # served by another's fetch: from the hot tier, or its staged copy if the hot tier refused it
            self._count(Counter(hot_hits=1) if isinstance(found, int) else Counter(staged_hits=1))
        if isinstance(found, int):
            return HotBlock(found)
        if member is not None:
            return self._member_frame(key, member, _member_bytes(block, member, found))
        return WireBlock(encode_frame(key, found, fmt=self._format(), secret=self.secret))

    def _member_alone(self, block: Block, member: int, readers: dict[str, str]) -> MemberFrame:
        """A pack member cut from a peer's or the warm tier's copy, else read by one ranged
        request with ``readers``' credentials (blocking; called without the lock)."""
        tally: Counter = Counter()
        above = self._fetcher.read_above_cold(block, tally)
        if above is not None:
            raw, _digest, source = above
            tally[f"{source}_hits"] += 1
            data = _member_bytes(block, member, raw)
        else:
            assert block.members is not None, "only a pack's members are read alone"
            request = block.members.requests()[member]
            data = self._catalog.source_of(block.key, readers).read_ranges([request], tally=tally)[0]
            tally["cold_misses"] += 1
        with self._cond:
            self._count(tally)
        return self._member_frame(block.key, member, data)

    # ----------------------------------------------------------------------- helpers
    def _count(self, tally: Counter) -> None:
        """One random read with its tallies, in the node's counters (call under the lock)."""
        tally.update(accesses=1, random_reads=1)
        self._accounting.tally(None, tally)

    def _format(self) -> FrameFormat:
        return FrameFormat(self.config.wire.zstd_level, self.config.wire.min_ratio)

    def _member_frame(self, key: str, member: int, data: bytes) -> MemberFrame:
        return MemberFrame(encode_frame(member_key(key, member), data, fmt=self._format(), secret=self.secret))


def _member_bytes(block: Block, member: int, raw: bytes) -> bytes:
    """Member ``member``'s bytes cut from the pack's raw bytes (members are concatenated in order)."""
    assert block.members is not None, "only a pack has members"
    sizes = block.members.sizes
    start = int(sizes[:member].sum())
    return raw[start:start + int(sizes[member])]
