"""Three simulated nodes (``ray.cluster_utils.Cluster``): peer transfer, partitioned caching, node loss.

The scenarios of the selected tests run in one process of their own (tests/multinode/scenario.py),
so their cluster is apart from this session's Ray; they share that cluster and moto server
(started once for this module), each with its own deployment (tier directories, actors), and
print their measurements as JSON, one line per scenario.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).parent / "multinode" / "scenario.py"
# The scenario each test checks: the module's run does those of the selected tests only.
SCENARIO_OF = {
    "test_peers_serve_the_second_epoch_with_zero_cold_reads": "peer",
    "test_blocks_too_large_for_a_share_of_the_object_store_are_never_asked_of_peers": "peer_limit",
    "test_two_nodes_of_two_ranks_read_epoch_two_from_their_hot_tiers": "locality",
    "test_a_node_lost_mid_epoch_leaves_the_survivors_exact": "node_loss",
    "test_tierload_serve_status_and_stop_on_a_cluster": "serve",
}
# The first test's setup runs every selected scenario (each had 300 s when it ran on its own).
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def scenario_results(request, tmp_path_factory) -> dict:
    """``{name: result}`` of every selected test's scenario, from one run of them on one cluster."""
    names = sorted({SCENARIO_OF[item.originalname] for item in request.session.items
                    if item.module is request.module})
    workdir = tmp_path_factory.mktemp("multinode")
    proc = subprocess.run([sys.executable, str(SCENARIO), ",".join(names), str(workdir)], capture_output=True,
                          text=True, timeout=880)
    results: dict = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            name, payload = line[len("RESULT "):].split(" ", 1)
            results[name] = json.loads(payload)
    results["_code"] = proc.returncode
    results["_output"] = f"exit code {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return results


@pytest.fixture
def run_scenario(scenario_results):
    """``run_scenario(name)``: that scenario's result from the module's run; fails the test with
    the scenario's traceback (or the run's output) if it did not finish."""
    def result_of(name: str) -> dict:
        result = scenario_results.get(name)
        assert scenario_results["_code"] == 0 and result is not None and "error" not in result, \
            f"scenario {name} failed:\n{(result or {}).get('error', '')}\n{scenario_results['_output']}"
        return result
    return result_of


def test_peers_serve_the_second_epoch_with_zero_cold_reads(run_scenario):
    """Case B31: each node's hot tier holds a third; warm is off. Epoch 2 comes from local hot tiers
    and peers (no cold GET), in a new shuffled order, every sample once across the ranks."""
    result = run_scenario("peer")
    for number, epoch in enumerate(result["epochs"], 1):
        print(f"\npeer scenario, epoch {number}: per rank {epoch['per_rank']}, hot hits {epoch['hot_hits']}, "
              f"peer hits {epoch['peer_hits']} ({epoch['peer_bytes']} B on the wire), cold GETs "
              f"{epoch['cold_gets']} ({epoch['cold_bytes']} B)", end="")
    assert result["distinct_nodes"] == 3  # one cache actor and one trainer per node
    first, second = result["epochs"]
    for epoch in (first, second):
        assert epoch["seen"] == list(range(90)) and epoch["per_rank"] == [30, 30, 30]  # exactly once
    assert all(one != two for one, two in zip(first["orders"], second["orders"], strict=True))  # reshuffled
    assert first["cold_gets"] == 90
    assert second["cold_bytes"] == 0 and second["cold_gets"] == 0
    assert second["peer_hits"] > 0 and second["peer_hits"] + second["hot_hits"] == 90
    assert 0 < second["peer_bytes"] < second["peer_hits"] * 2000  # zstd on the wire between nodes


@pytest.mark.slow
def test_blocks_too_large_for_a_share_of_the_object_store_are_never_asked_of_peers(run_scenario):
    """Case B24 across nodes: a peer's answer is a Ray return value (it passes whole through the
    object store), so a block larger than ``hot.peer_max_store_fraction`` of the node's store comes
    from warm or cold instead; every sample still arrives once."""
    result = run_scenario("peer_limit")
    first, second = result["epochs"]
    for epoch in (first, second):
        assert epoch["seen"] == list(range(90)) and epoch["per_rank"] == [30, 30, 30]
    assert second["peer_hits"] == 0 and second["peer_bytes"] == 0
    assert second["cold_gets"] > 0 and second["hot_hits"] + second["cold_gets"] == 90


@pytest.mark.slow
def test_two_nodes_of_two_ranks_read_epoch_two_from_their_hot_tiers(run_scenario):
    """Case B31, as reported: 2 nodes x 2 ranks, one hot dir per node, the data fits the two hot
    tiers together, shuffle on: epoch 2 makes at most 5% of epoch 1's cold GETs, its order differs,
    and each sample is read once per epoch across all ranks."""
    result = run_scenario("locality")
    assert len(set(result["placement"])) == 2 and len(result["placement"]) == 4
    first, second = result["epochs"]
    for number, epoch in enumerate(result["epochs"], 1):
        print(f"\nlocality, epoch {number}: cold GETs {epoch['cold_gets']}, hot hits {epoch['hot_hits']}, "
              f"peer hits {epoch['peer_hits']}", end="")
    for epoch in (first, second):
        # 90 samples over 4 ranks: equal shares of 23, the last two padded by repeating (case B03's rule).
        assert epoch["per_rank"] == [23] * 4 and sorted(set(epoch["seen"])) == list(range(90))
        assert len(epoch["seen"]) == 92
    assert all(one != two for one, two in zip(first["orders"], second["orders"], strict=True))
    # Each rank reports its own streams' counters (own_epoch_stats), so the sums are the cluster's.
    assert first["cold_gets"] > 0 and second["cold_gets"] <= 0.05 * first["cold_gets"]


def test_a_node_lost_mid_epoch_leaves_the_survivors_exact(run_scenario):
    """The third node is removed mid-epoch: survivors finish their shares exactly once, the lost
    node's blocks come from warm or cold, nothing hangs, and the coordinator forgets the node."""
    result = run_scenario("node_loss")
    survivors = result["survivors"]
    print(f"\nnode loss: survivors per rank {survivors['per_rank']} in {result['survivor_seconds']:.1f} s, "
          f"warm hits {survivors['warm_hits']}, cold GETs {survivors['cold_gets']}; lost rank: {result['doomed']}; "
          f"coordinator forgot {result['lost_node'] in result['coordinator']['forgotten_nodes']}", end="")
    assert survivors["seen"] == sorted(result["expected"][0] + result["expected"][1])
    assert survivors["per_rank"] == [30, 30]
    assert result["doomed"] != "finished"  # the third rank really died mid-epoch
    assert survivors["warm_hits"] + survivors["cold_gets"] > 0  # blocks it held came from below
    assert result["survivor_seconds"] < 60
    coordinator = result["coordinator"]
    assert result["lost_node"] in coordinator["forgotten_nodes"]
    assert result["lost_node"] not in coordinator["nodes"]


def test_tierload_serve_status_and_stop_on_a_cluster(run_scenario):
    """`tierload serve` starts one cache per node and the coordinator (a second call changes
    nothing); a job runs through those actors; `status` reports each node; `stop` ends them."""
    result = run_scenario("serve")
    first, second = result["serve"]
    assert first["code"] == 0 and "started 4 actor(s)" in first["out"]
    assert second["code"] == 0 and "nothing to start" in second["out"]
    assert len(result["actors"]) == 4 and result["actors_after_job"] == result["actors"]  # the job reused them
    assert result["job"]["seen"] == list(range(90))
    status = result["status"]
    assert len(status["nodes"]) == 3 and all(node["accesses"] == 30 for node in status["nodes"])
    assert all(node["levels"][0]["used_bytes"] <= node["levels"][0]["capacity_bytes"] for node in status["nodes"])
    assert status["coordinator"]["warm"]["blocks"] == 90
    assert "hot-disk" in result["table"] and "(shared)" in result["table"]
    assert result["stop"]["code"] == 0 and result["left"] == []
