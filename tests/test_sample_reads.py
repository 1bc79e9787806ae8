"""The node cache's reads of single samples (:mod:`tierload.node.sample_reads`) driven directly, in one
process: no Ray, no channel, no moto. Real files through a ``file://`` cold tier, a real hot
directory, the parts wired by :func:`tierload.node.parts.node_parts`; outcomes from the counters.
"""

from __future__ import annotations

import numpy as np
import pytest

from tierload.config.loading import load_config
from tierload.data.blocks import Block
from tierload.data.packs import PackMembers
from tierload.errors import ServiceError
from tierload.frames.blockfile import HEADER_SIZE, decode_frame, decode_frame_file
from tierload.node.key_index import KeyIndex
from tierload.node.parts import NodeParts, node_parts
from tierload.node.sample_reads import SampleReads
from tierload.stores.cold.source import ColdSource
from tierload.wire.messages import HotBlock, MemberFrame, SampleRead, WireBlock, member_key

OBJECT_BYTES = 1000
WAIT_S = 30.0  # a bound on waiting for fetches, never an assertion


@pytest.fixture
def node(tmp_path):
    """``(parts, reads, pack block, plain block, {member: bytes})`` over 8 files: a pack of the
    first 6, the 7th as a plain block."""
    folder = tmp_path / "src"
    folder.mkdir()
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 256, OBJECT_BYTES, dtype=np.uint8).tobytes() for _ in range(8)]
    for i, payload in enumerate(data):
        (folder / f"f{i:03d}.bin").write_bytes(payload)
    config = load_config({"hot": {"dir": str(tmp_path / "hot"), "capacity_bytes": 64 * (OBJECT_BYTES + HEADER_SIZE)},
                          "metrics": {"enabled": False}})
    parts: NodeParts = node_parts(config, "node-test", config.hot.dir)
    parts.hot.start()
    source = ColdSource(f"file://{folder}", config.cold)
    listed = list(source.list_objects())
    pack = Block.pack(PackMembers.of([o.url for o in listed[:6]], [o.version for o in listed[:6]],
                                     [o.size for o in listed[:6]]))
    plain = Block.of(listed[6].url, listed[6].version, 0, listed[6].size)
    with parts.cond:
        parts.catalog.add("ds", KeyIndex([pack, plain]), source)
    reads = SampleReads(config, parts.cond, parts.catalog, parts.hot, parts.fetcher, parts.pins, parts.accounting)
    yield parts, reads, pack, plain, data
    parts.fetcher.close()


def _settled_stats(parts: NodeParts) -> dict:
    with parts.cond:
        assert parts.cond.wait_for(lambda: parts.fetcher.stats()["inflight"] == 0, WAIT_S)
        return dict(parts.accounting.stats)


def test_a_pack_member_no_tier_holds_is_one_ranged_read_of_its_bytes(node):
    parts, reads, pack, _plain, data = node
    answer = reads.read(SampleRead("ds", pack.key, 2))
    assert isinstance(answer, MemberFrame)
    assert decode_frame(member_key(pack.key, 2), answer.frame)[0] == data[2]
    stats = _settled_stats(parts)
    assert (stats["cold_gets"], stats["cold_bytes"], stats["cold_misses"]) == (1, OBJECT_BYTES, 1)
    assert (stats["accesses"], stats["random_reads"]) == (1, 1)
    assert pack.key not in parts.hot.resident_keys()  # one member is not the pack: nothing admitted


def test_a_whole_block_is_fetched_once_placed_hot_and_then_a_hot_hit(node):
    parts, reads, pack, plain, data = node
    first = reads.read(SampleRead("ds", plain.key))
    assert isinstance(first, HotBlock)
    assert decode_frame_file(plain.key, parts.hot.levels[first.level].store.path(plain.key)) == data[6]
    stats = _settled_stats(parts)
    assert (stats["cold_misses"], stats["cold_gets"], stats["cold_bytes"]) == (1, 1, OBJECT_BYTES)
    assert isinstance(reads.read(SampleRead("ds", plain.key)), HotBlock)
    whole_pack = reads.read(SampleRead("ds", pack.key))  # member None: the whole pack, its members concurrently
    assert isinstance(whole_pack, (HotBlock, WireBlock))
    member_of_hot_pack = reads.read(SampleRead("ds", pack.key, 4))  # the pack is hot now: read its file
    assert isinstance(member_of_hot_pack, HotBlock)
    stats = _settled_stats(parts)
    assert stats["hot_hits"] == 2 and stats["random_reads"] == stats["accesses"] == 4
    assert stats["cold_bytes"] == 7 * OBJECT_BYTES  # the plain block once, the pack's six members once


def test_a_block_of_no_registered_dataset_is_refused(node):
    _parts, reads, pack, _plain, _data = node
    with pytest.raises(ServiceError, match="is not registered"):
        reads.read(SampleRead("other", pack.key, 0))
    with pytest.raises(ServiceError, match="member 6 of block"):
        reads.read(SampleRead("ds", pack.key, 6))
