"""The node cache's parts driven directly, in one process: no Ray, no actor, no channel, no moto.

The parts are wired by :func:`tierload.node.parts.node_parts`, the same function
:class:`~tierload.node.node_cache.NodeCache` builds them with; the cold tier is real files read
through a ``file://`` :class:`~tierload.stores.cold.source.ColdSource`, the hot tier a real
directory. The prefetch loop's thread is not started: each test calls
:meth:`~tierload.node.stream_table.StreamTable.schedule_ahead` and
:meth:`~tierload.node.stream_table.StreamTable.expire_idle` itself, so what is scheduled does not
depend on timing. Outcomes are read from the parts' counters.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tierload.config.loading import load_config
from tierload.data.blocks import Block
from tierload.data.runs import NEVER
from tierload.errors import StreamNotOpenError
from tierload.frames.blockfile import HEADER_SIZE
from tierload.node.key_index import KeyIndex
from tierload.node.parts import NodeParts, node_parts
from tierload.simulator.belady import min_hits
from tierload.stores.cold.source import ColdSource
from tierload.wire.messages import StreamPlan

BLOCK_BYTES = 1000  # random bytes: frames stay raw, HEADER_SIZE + BLOCK_BYTES each
FRAME_BYTES = HEADER_SIZE + BLOCK_BYTES
WAIT_S = 30.0  # a bound on waiting for fetches, never an assertion


def _source_files(folder, count: int, seed: int = 0) -> dict[str, bytes]:
    """``count`` files of random bytes under ``folder``: ``{file name: bytes}``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    files = {}
    for i in range(count):
        data = rng.integers(0, 256, BLOCK_BYTES, dtype=np.uint8).tobytes()
        (folder / f"f{i:03d}.bin").write_bytes(data)
        files[f"f{i:03d}.bin"] = data
    return files


def _blocks(source: ColdSource) -> list[Block]:
    """One whole-object block per listed file, in URL order (as a ``files`` manifest has them)."""
    return [Block.of(info.url, info.version, 0, info.size) for info in source.list_objects()]


@pytest.fixture
def make_parts(tmp_path):
    """``make_parts(**config sections) -> NodeParts`` over a hot directory under ``tmp_path``;
    every fetch loop started is stopped at the end."""
    made: list[NodeParts] = []

    def make(**sections) -> NodeParts:
        hot = {"dir": str(tmp_path / f"hot{len(made)}"), "capacity_bytes": 64 * FRAME_BYTES,
               **sections.pop("hot", {})}
        config = load_config({"hot": hot, "metrics": {"enabled": False}, **sections})
        parts = node_parts(config, "node-test", config.hot.dir)
        parts.hot.start()
        made.append(parts)
        return parts

    yield make
    for parts in made:
        parts.fetcher.close()


def _register(parts: NodeParts, folder, dataset_id: str = "ds") -> list[Block]:
    source = ColdSource(f"file://{folder}", parts.hot.config.cold)
    blocks = _blocks(source)
    with parts.cond:
        parts.catalog.add(dataset_id, KeyIndex(blocks), source)
    return blocks


def _open(parts: NodeParts, stream_id: str, seq, consume_len: int | None = None, consumers: int = 1,
          dataset_id: str = "ds", epoch: int = 0, lineage: str = "") -> None:
    seq = np.asarray(seq, dtype=np.int32)
    plan = StreamPlan(dataset_id, epoch, seq, len(seq) if consume_len is None else consume_len, lineage=lineage)
    with parts.cond:
        assert parts.streams.open(stream_id, consumers, plan)


def _acquire(parts: NodeParts, stream_id: str, consumer: int, position: int) -> tuple[str, int | bytes]:
    """What :meth:`NodeCache.acquire` does under its lock: the block at ``position``, hot or staged."""
    with parts.cond:
        stream = parts.streams.require(stream_id)
        return parts.acquire(stream, consumer, position, time.monotonic() + WAIT_S)


def _settle(parts: NodeParts) -> None:
    """Wait until no fetch is in flight (bounded; the counters are read afterwards)."""
    with parts.cond:
        assert parts.cond.wait_for(lambda: parts.fetcher.stats()["inflight"] == 0, WAIT_S)


def _resident(parts: NodeParts) -> set[str]:
    with parts.cond:
        return set(parts.hot.resident_keys())


# ---------------------------------------------------------------------------------- catalog
def test_catalog_registers_blocks_and_answers_owners_and_sizes(make_parts, tmp_path):
    files = _source_files(tmp_path / "src", 4)
    parts = make_parts()
    blocks = _register(parts, tmp_path / "src", "a")
    # A second dataset over the same files shares their keys; the last file is left out of it.
    source_b = ColdSource(f"file://{tmp_path / 'src'}", parts.hot.config.cold)
    with parts.cond:
        parts.catalog.add("b", KeyIndex(blocks[:3]), source_b)
        parts.catalog.add("a", KeyIndex(blocks[:1]), source_b)  # registered already: changes nothing
    catalog = parts.catalog

    assert "a" in catalog and "b" in catalog and "c" not in catalog
    assert catalog.num_blocks("a") == 4 and catalog.num_blocks("b") == 3
    assert catalog.block_sizes("a").tolist() == [BLOCK_BYTES] * 4
    assert catalog.block_sizes("a").dtype == np.int64
    assert catalog.owners(blocks[1].key) == [("a", 1), ("b", 1)]
    assert catalog.owners(blocks[3].key) == [("a", 3)] and catalog.owners("no-such-key") == []
    rows = catalog.locate([blocks[3].key, "no-such-key", blocks[1].key])  # the oracle's batch lookup
    assert {name: (r.tolist(), i.tolist()) for name, (r, i) in rows.items()} == {"a": ([0, 2], [3, 1]),
                                                                                 "b": ([2], [1])}
    assert catalog.block_at("b", 2) == blocks[2] and catalog.block(blocks[2].key) == blocks[2]
    assert catalog.block("no-such-key") is None
    assert catalog.source_of(blocks[1].key) is catalog.source_of(blocks[3].key)  # the first registrant's: a's
    assert catalog.source_of(blocks[1].key) is not source_b

    tally: dict = {}
    assert catalog.read_cold(blocks[2].key, tally) == files["f002.bin"]
    assert tally == {"cold_gets": 1, "cold_bytes": BLOCK_BYTES}


# ------------------------------------------------------------------------------ single flight
def test_consumers_needing_the_same_blocks_cause_one_cold_read_each(make_parts, tmp_path):
    _source_files(tmp_path / "src", 6)
    parts = make_parts()
    blocks = _register(parts, tmp_path / "src")
    # Two ranks read every block, in different orders, at the same time.
    orders = {"rank0": [0, 1, 2, 3, 4, 5], "rank1": [5, 4, 3, 2, 1, 0]}
    for stream_id, order in orders.items():
        _open(parts, stream_id, order)
    start = threading.Barrier(2)
    found: dict[str, list] = {stream_id: [] for stream_id in orders}
    errors: list[BaseException] = []

    def consume(stream_id: str) -> None:
        try:
            start.wait(WAIT_S)
            for position in range(len(orders[stream_id])):
                found[stream_id].append(_acquire(parts, stream_id, 0, position))
            with parts.cond:
                parts.streams.close_consumer(stream_id, 0)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(stream_id,)) for stream_id in orders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert not errors
    _settle(parts)

    stats = parts.accounting.stats
    assert stats["cold_gets"] == 6 and stats["cold_bytes"] == 6 * BLOCK_BYTES  # each block read once
    assert stats["accesses"] == 12
    assert stats["cold_misses"] + stats["hot_hits"] == 12 and stats["cold_misses"] == 6
    for stream_id, order in orders.items():
        assert [key for key, _ in found[stream_id]] == [blocks[i].key for i in order]
        assert all(level == 0 for _, level in found[stream_id])  # every block is in the hot tier
    assert _resident(parts) == {block.key for block in blocks}


# ------------------------------------------------------------------------------ prefetch depth
def test_a_stream_prefetches_at_most_depth_blocks_ahead_of_its_slowest_consumer(make_parts, tmp_path):
    _source_files(tmp_path / "src", 12)
    parts = make_parts(prefetch={"depth_blocks": 3})
    blocks = _register(parts, tmp_path / "src")
    # 10 positions this epoch, 2 more of look-ahead into the next (never prefetched).
    _open(parts, "rank0", list(range(12)), consume_len=10, consumers=2)
    streams = parts.streams

    with parts.cond:
        assert streams.schedule_ahead() == 3
        assert streams.schedule_ahead() == 0  # nobody moved: nothing more
    _settle(parts)
    assert parts.accounting.stats["cold_gets"] == 3
    assert _resident(parts) == {block.key for block in blocks[:3]}

    with parts.cond:
        streams.progress("rank0", 0, 6)  # the fast consumer is far ahead...
        streams.progress("rank0", 1, 2)  # ...the slow one passed two blocks: two more
        assert streams.schedule_ahead() == 2
        stream = streams.require("rank0")
        assert stream.cursor == 2 and stream.lead() == (3, 3)
    _settle(parts)
    assert parts.accounting.stats["cold_gets"] == 5

    with parts.cond:
        streams.progress("rank0", 1, 6)  # both at 6 or beyond: three more, 6..8
        assert streams.schedule_ahead() == 3
        assert stream.cursor == 6 and stream.lead() == (3, 3)
        streams.progress("rank0", 0, 9)
        streams.progress("rank0", 1, 9)
        assert streams.schedule_ahead() == 1  # the epoch's last run; the look-ahead is not fetched
        assert streams.schedule_ahead() == 0
    _settle(parts)
    assert parts.accounting.stats["cold_gets"] == 9  # 0..4, 6..9 (the consumers read 5 without asking)
    assert blocks[10].key not in _resident(parts) and blocks[11].key not in _resident(parts)


# ------------------------------------------------------------------------ clairvoyant = MIN
def test_a_hot_tier_smaller_than_the_plan_hits_as_often_as_beladys_min(make_parts, tmp_path):
    _source_files(tmp_path / "src", 8)
    capacity = 3 * FRAME_BYTES
    parts = make_parts(hot={"capacity_bytes": capacity}, prefetch={"depth_blocks": 0},
                       policy={"hot": {"eviction": "clairvoyant"}})
    blocks = _register(parts, tmp_path / "src")
    rng = np.random.default_rng(7)
    seq = [int(rng.integers(0, 8))]
    while len(seq) < 60:  # no block twice in a row: one position is one run, one access
        nxt = int(rng.integers(0, 8))
        if nxt != seq[-1]:
            seq.append(nxt)
    _open(parts, "rank0", seq)
    with parts.cond:
        parts.accounting.record_trace(True)

    for position in range(len(seq)):
        _acquire(parts, "rank0", 0, position)
        _settle(parts)
    with parts.cond:
        parts.streams.close_consumer("rank0", 0)
        trace = parts.accounting.record_trace(False)

    index = {block.key: i for i, block in enumerate(blocks)}
    assert [index[key] for key, _, _ in trace] == seq
    sizes = np.zeros(len(blocks), dtype=np.int64)
    for key, stored_bytes, _ in trace:
        sizes[index[key]] = stored_bytes
    assert set(sizes.tolist()) == {FRAME_BYTES}
    best = min_hits(np.asarray([index[key] for key, _, _ in trace]), sizes, capacity, engine="reference")
    stats = parts.accounting.stats
    assert best.exact and 0 < best.hits < len(seq)
    assert stats["hot_hits"] == best.hits
    assert stats["cold_gets"] == len(seq) - best.hits
    evictions = sum(level.evictions for level in parts.hot.stats())
    assert evictions > 0 and len(_resident(parts)) <= 3


# ---------------------------------------------------------------------------------- staging
def test_a_block_the_hot_tier_refuses_is_served_from_staging_and_read_once(make_parts, tmp_path):
    files = _source_files(tmp_path / "src", 2)
    parts = make_parts(hot={"capacity_bytes": BLOCK_BYTES // 2})  # no block fits
    blocks = _register(parts, tmp_path / "src")
    _open(parts, "rank0", [0, 1], consumers=2)

    key, first = _acquire(parts, "rank0", 0, 0)
    assert key == blocks[0].key and first == files["f000.bin"]
    with parts.cond:  # held while a consumer still needs it
        assert parts.fetcher.stats()["staged_bytes"] == BLOCK_BYTES
    _, second = _acquire(parts, "rank0", 1, 0)  # the other consumer: the same staged bytes
    assert second == files["f000.bin"]
    stats = parts.accounting.stats
    assert stats["cold_gets"] == 1 and stats["cold_misses"] == 1 and stats["accesses"] == 1
    assert _resident(parts) == set()

    with parts.cond:  # both consumers passed it: it leaves memory
        parts.streams.progress("rank0", 0, 1)
        assert parts.fetcher.stats()["staged_bytes"] == BLOCK_BYTES
        parts.streams.progress("rank0", 1, 1)
        assert parts.fetcher.stats()["staged_bytes"] == 0


@pytest.mark.parametrize("fits", [True, False])
def test_an_access_of_a_block_in_flight_counts_where_the_fetch_puts_it(make_parts, tmp_path, fits):
    """A planned access scheduled while its block's fetch is in flight is a hot hit only if the
    hot tier takes the block; a refused block serves it from its staged copy, which Belady's MIN
    at the hot capacity does not have (bench runs saw hot hit 18 of 70 accesses against MIN's 17)."""
    _source_files(tmp_path / "src", 2)
    capacity = 4 * FRAME_BYTES if fits else BLOCK_BYTES // 2  # all blocks, or none
    parts = make_parts(hot={"capacity_bytes": capacity}, prefetch={"depth_blocks": 3})
    _register(parts, tmp_path / "src")
    seq = [0, 1, 0]
    _open(parts, "rank0", seq)
    with parts.cond:  # all three runs at once, under the lock: block 0's fetch cannot end in between
        assert parts.streams.schedule_ahead() == 3
    _settle(parts)

    stats = parts.accounting.stats
    best = min_hits(np.asarray(seq), np.full(2, FRAME_BYTES), capacity, engine="reference")
    assert stats["accesses"] == 3 and stats["cold_gets"] == 2 and stats["cold_misses"] == 2
    assert (stats["hot_hits"], stats["staged_hits"]) == ((1, 0) if fits else (0, 1))
    assert stats["hot_hits"] == best.hits


def test_an_access_of_a_staged_block_is_a_staged_hit(make_parts, tmp_path):
    _source_files(tmp_path / "src", 1)
    parts = make_parts(hot={"capacity_bytes": BLOCK_BYTES // 2})  # no block fits
    _register(parts, tmp_path / "src")
    _open(parts, "rank0", [0])
    with parts.cond:
        assert parts.streams.schedule_ahead() == 1
    _settle(parts)  # refused and staged: rank 0 still needs it
    _open(parts, "rank1", [0])
    with parts.cond:
        assert parts.fetcher.stats()["staged_bytes"] == BLOCK_BYTES
        assert parts.streams.schedule_ahead() == 1
        rank1 = dict(parts.streams.require("rank1").stats)
    assert (rank1["accesses"], rank1["hot_hits"], rank1["staged_hits"]) == (1, 0, 1)
    assert parts.accounting.stats["cold_gets"] == 1


# ------------------------------------------------------------------------ idle expiry, ghosts
def test_an_idle_stream_expires_and_its_ghost_keeps_informing_eviction(make_parts, tmp_path):
    _source_files(tmp_path / "src", 6)
    parts = make_parts(prefetch={"stream_idle_timeout_s": 600})
    blocks = _register(parts, tmp_path / "src")
    # Epoch 0 reads blocks 0..3; its plan looks ahead into epoch 1's first two blocks (5, 4).
    _open(parts, "e0", [0, 1, 2, 3, 5, 4], consume_len=4, lineage="rank0")
    _open(parts, "other", [0, 1], lineage="rank1")  # no look-ahead: it leaves no ghost
    streams, oracle = parts.streams, parts.hot.oracle
    keys = [block.key for block in blocks]

    with parts.cond:
        assert streams.expire_idle() == []  # touched just now
        assert sorted(streams.expire_idle(now=time.monotonic() + 3600)) == ["e0", "other"]
        assert streams.rows() == []
        with pytest.raises(StreamNotOpenError, match="e0"):
            streams.require("e0")
        finished = {row.stream_id: row for row in parts.accounting.finished_rows()}
        assert set(finished) == {"e0", "other"} and not finished["e0"].finished
        # The ghost's look-ahead still says which blocks come next; the rest are needed never.
        assert [stream.stream_id for stream in parts.plans["ds"]] == ["e0"]
        distances = oracle.distances(keys).tolist()
        assert min(distances) >= 0  # nothing is needed before the next epoch starts
        assert distances[5] < distances[4] < NEVER
        assert all(distance >= NEVER for distance in distances[:4])

    _open(parts, "e1", [5, 4, 3, 2, 1, 0], epoch=1, lineage="rank0")  # the lineage's next epoch
    with parts.cond:
        assert [stream.stream_id for stream in parts.plans["ds"]] == ["e1"]  # the ghost is gone
        assert all(distance < NEVER for distance in oracle.distances(keys).tolist())

