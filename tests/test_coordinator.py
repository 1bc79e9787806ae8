"""The coordinator's bookkeeping, driven in process (its Ray side is covered by the multi-node tests)."""

from __future__ import annotations

from tierload.config.loading import load_config
from tierload.coordinator.actor import Coordinator
from tierload.stores.keys import block_key
from tierload.wire.messages import SyncReport

KEYS = [block_key(f"s3://b/{i}", '"v"') for i in range(6)]


def coordinator(tmp_path, warm=True, alive=None):
    config = load_config({"warm": {"url": str(tmp_path / "warm") if warm else None, "capacity_bytes": 3000}})
    return Coordinator(config, node_alive=lambda: alive).start()


def test_holder_map_deltas_and_snapshots(tmp_path):
    coord = coordinator(tmp_path, warm=False)
    first = coord.sync("a", SyncReport(hot_full=KEYS[:3], since=-1))
    assert first.full and set(first.holders) == set(KEYS[:3])
    version = first.holders_version
    coord.sync("b", SyncReport(hot_added=[KEYS[0], KEYS[4]], since=version))
    delta = coord.sync("a", SyncReport(hot_removed=[KEYS[1]], since=version))
    assert not delta.full
    assert delta.holders == {KEYS[0]: ["a", "b"], KEYS[4]: ["b"], KEYS[1]: []}
    assert coord.holders(KEYS[:2]) == {KEYS[0]: ["a", "b"], KEYS[1]: []}
    assert coord.stats().held_blocks == 3  # removals leave no empty entries behind
    assert coord.forget_node("a") == 2
    assert coord.holders([KEYS[0], KEYS[2]]) == {KEYS[0]: ["b"], KEYS[2]: []}


def test_a_node_that_ray_reports_dead_is_forgotten(tmp_path):
    coord = coordinator(tmp_path, warm=False, alive={"a"})
    coord.sync("a", SyncReport(hot_full=KEYS[:2]))
    coord.sync("b", SyncReport(hot_full=KEYS[2:4]))
    coord.sync("a", SyncReport(lost=["b"]))
    stats = coord.stats()
    assert stats.forgotten_nodes == ("b",) and set(stats.nodes) == {"a"} and stats.held_blocks == 2


def test_warm_admission_reserves_before_writes_and_respects_capacity(tmp_path):
    coord = coordinator(tmp_path)
    answer = coord.sync("a", SyncReport(counts={k: 1 for k in KEYS}, now=0.0,
                                        proposals=[(k, 1000) for k in KEYS]))
    assert answer.granted == [True, True, True, False, False, False]  # 3000 bytes fit three
    coord.commit(KEYS[:2], [KEYS[2]])  # the third write failed: its space is released
    stats = coord.stats().warm
    assert stats is not None and stats.blocks == 2 and stats.used_bytes == 2000 and stats.reserved_blocks == 0
    again = coord.sync("a", SyncReport(proposals=[(KEYS[0], 1000)]))
    assert again.present == [True] and again.granted == [False]
