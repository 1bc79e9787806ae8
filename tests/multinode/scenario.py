"""Multi-node scenarios on a simulated Ray cluster (``ray.cluster_utils.Cluster``).

Run as ``python tests/multinode/scenario.py SCENARIO[,SCENARIO...] WORKDIR``; prints one line
``RESULT NAME JSON`` per scenario. The run starts one 3-node cluster (each node with its own hot
directory and a custom resource ``node<i>``) and moto's S3 server, in its own process, apart
from the test session's Ray; each scenario deploys tierload afresh on it (its own tier
directories under ``WORKDIR/NAME``, so its own actors), with its ranks (by default one per node:
rank = node index, world size 3), and stops every tierload actor before the next one starts.
Starting the cluster, the server and the training processes (``Trainer``: each scenario opens
its own dataset in them and closes it at its end) once per run instead of once per scenario
saves their start-up for every scenario but the first. Scenarios run in the order of ``ORDER``
whatever the command line's order: ``node_loss`` removes a node of the shared cluster, so it comes
last.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import ray
from ray.cluster_utils import Cluster

from tierload.deploy.local_ray import lean_local_ray, local_ray_system_config
from tierload.node.stats import hit_ratios
from tierload_tools.s3local import LocalS3

NODES = 3
SAMPLES = 90
SIZE = 2000


@ray.remote(num_cpus=0)
class Trainer:
    """A training process on one node: iterates its rank's share of each epoch of the dataset it
    opened. It serves the scenarios of a run one after another (:meth:`open`, :meth:`close`): a
    process per scenario and node would pay its start-up (Python, torch, tierload) each time."""

    def __init__(self) -> None:
        self.dataset = None

    def open(self, rank: int, url: str, config: dict, storage_options: dict, world_size: int = NODES) -> None:
        from tierload import TieredDataset

        self.dataset = TieredDataset(url, config, rank=rank, world_size=world_size, storage_options=storage_options,
                                     layout="files", batch_size=5)

    def close(self) -> None:
        """Drop the dataset and stop this process's keepers, so that the scenario's actors, stopped on
        purpose next, stay stopped (a keeper would start a node cache again)."""
        import gc

        from tierload.deploy.keeper import stop_keepers

        self.dataset = None
        stop_keepers()
        gc.collect()

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def epoch(self, epoch: int, delay_s: float = 0.0) -> dict:
        from torch.utils.data import DataLoader

        self.dataset.set_epoch(epoch)
        seen = []
        loader = DataLoader(self.dataset, batch_size=5, num_workers=0, collate_fn=lambda batch: batch)
        for batch in loader:
            seen.extend(int(bytes(sample[:8])) for sample, _ in batch)
            time.sleep(delay_s)
        return {"seen": seen, "stats": self.dataset.own_epoch_stats(epoch)}  # summed over ranks: no double count

    def land_warm_writes(self) -> None:
        """This node's cache finishes its fetches and syncs with the coordinator now (``sync_now``):
        its warm writes are written and its residency reported when this returns (as
        tests/helpers.py's ``land_warm_writes``, inlined: this class runs in Ray's workers)."""
        deadline = time.monotonic() + 60
        while self.dataset.cache_stats()["inflight"]:
            assert time.monotonic() < deadline, "the node cache's fetches never finished"
            time.sleep(0.01)
        self.dataset._link.call(lambda cache: cache.sync_now(), wait_s=30.0)


class Shared:
    """One 3-node cluster and moto's server with the data set, shared by the scenarios of a run."""

    def __init__(self) -> None:
        # Each node started as tierload starts its own local Ray (no API server, autoscaler monitor or
        # pre-started idle workers: tierload.deploy.local_ray), without metrics as the deployments here
        # run (TIERLOAD_METRICS__ENABLED, tests/conftest.py) and without a log monitor (log_to_driver=False).
        with lean_local_ray(metrics=False, log_to_driver=False):
            self.cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "resources": {"node0": 1}, "object_store_memory": 100 * 2**20,
                "_system_config": local_ray_system_config(metrics=False)})
            self.nodes = [self.cluster.head_node]
            for index in range(1, NODES):
                self.nodes.append(self.cluster.add_node(num_cpus=1, resources={f"node{index}": 1},
                                                        object_store_memory=100 * 2**20))
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, namespace="tierload", log_to_driver=False, configure_logging=False)
        self.trainers: dict[tuple[int, int], ray.actor.ActorHandle] = {}
        self.s3 = LocalS3().start()
        fs = self.s3.create_bucket("multinode")
        fs.pipe({f"multinode/ds/obj-{i:05d}.bin": f"{i:08d}".encode() + bytes(SIZE - 8) for i in range(SAMPLES)})

    def trainer(self, node: int, slot: int = 0) -> ray.actor.ActorHandle:
        """The run's training process number ``slot`` on node ``node``, started when first asked for."""
        if (node, slot) not in self.trainers:
            self.trainers[node, slot] = Trainer.options(resources={f"node{node}": 0.01}).remote()
        return self.trainers[node, slot]

    def close(self) -> None:
        self.s3.stop()
        ray.shutdown()
        self.cluster.shutdown()


def start(shared: Shared, workdir: str, warm: bool, per_node_fraction: float, depth_blocks: int = 64,
          start_trainers: bool = True, node_count: int = NODES, ranks_per_node: int = 1,
          hot_extra: dict | None = None):
    """A deployment of its own (tier directories under ``workdir``) on the shared cluster, with
    ``ranks_per_node`` trainers on each of its first ``node_count`` nodes."""
    stored = SIZE + 40  # block header
    config = {
        "hot": {"dir": f"{workdir}/hot/{{node}}", "capacity_bytes": int(SAMPLES * stored * per_node_fraction),
                "peer_timeout_s": 3.0, **(hot_extra or {})},
        "warm": {"url": f"{workdir}/warm" if warm else None, "capacity_bytes": SAMPLES * stored * 2},
        # One block per object: capacities above are sized in objects (packs: tests/test_packs.py).
        "manifest": {"cache_dir": f"{workdir}/manifests", "pack_target_bytes": 0},
        "prefetch": {"depth_blocks": depth_blocks},
    }
    world_size = node_count * ranks_per_node
    trainers = [shared.trainer(rank // ranks_per_node, rank % ranks_per_node)
                for rank in range(world_size)] if start_trainers else []
    ray.get([trainer.open.remote(rank, "s3://multinode/ds", config, shared.s3.storage_options, world_size)
             for rank, trainer in enumerate(trainers)])
    return config, trainers


def end(config: dict, trainers: list, wait: bool = True) -> None:
    """Close a scenario's datasets in its trainers, stop its actors, and (``wait``) wait until no
    named actor is left, so the next scenario on the shared cluster starts from a cluster without
    tierload actors."""
    from tierload.config.loading import load_config
    from tierload.deploy.runtime import stop_actors

    for trainer in trainers:
        try:
            ray.get(trainer.close.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - on a removed node: already gone
            pass
    stop_actors(load_config(config))
    if not wait:
        return
    deadline = time.monotonic() + 60
    while ray.util.list_named_actors(all_namespaces=True):
        if time.monotonic() > deadline:
            raise RuntimeError(f"actors left after the scenario: {ray.util.list_named_actors(all_namespaces=True)}")
        time.sleep(0.1)


def summarize(results: list[dict]) -> dict:
    stats = [r["stats"] for r in results]
    return {"seen": sorted(i for r in results for i in r["seen"]),
            "orders": [r["seen"] for r in results],
            "per_rank": [len(r["seen"]) for r in results],
            "cold_bytes": sum(s.get("cold_bytes", 0) for s in stats),
            "cold_gets": sum(s.get("cold_gets", 0) for s in stats),
            "peer_hits": sum(s.get("peer_hits", 0) for s in stats),
            "peer_bytes": sum(s.get("peer_bytes", 0) for s in stats),
            "hot_hits": sum(s.get("hot_hits", 0) for s in stats),
            "warm_hits": sum(s.get("warm_hits", 0) for s in stats),
            "accesses": sum(s.get("accesses", 0) for s in stats),
            "hit_ratio_per_rank": [hit_ratios(s) for s in stats]}


def scenario_peer(shared: Shared, workdir: str, hot_extra: dict | None = None) -> dict:
    """Warm disabled, each hot tier holds a third: epoch 2 must come from hot tiers and peers only."""
    config, trainers = start(shared, workdir, warm=False, per_node_fraction=0.36, hot_extra=hot_extra)
    try:
        placement = ray.get([t.node_id.remote() for t in trainers])
        epochs = []
        for epoch in range(2):
            epochs.append(summarize(ray.get([t.epoch.remote(epoch) for t in trainers])))
            ray.get([t.land_warm_writes.remote() for t in trainers])  # the epoch's residency reaches the coordinator
        return {"distinct_nodes": len(set(placement)), "epochs": epochs}
    finally:
        end(config, trainers)


def scenario_peer_limit(shared: Shared, workdir: str) -> dict:
    """Case B24 across nodes: as ``peer``, but blocks (2 kB) are larger than the share of a node's
    object store (100 MiB) a peer may send (``hot.peer_max_store_fraction``: 1e-5, about 1 kB)."""
    return scenario_peer(shared, workdir, hot_extra={"peer_max_store_fraction": 1e-5})


def scenario_locality(shared: Shared, workdir: str) -> dict:
    """Case B31: 2 nodes x 2 ranks (the shared cluster's third node runs no trainer, so it has no
    node cache), warm off, the two hot tiers together hold the data: shuffled epochs 1 and 2,
    epoch 2 from the hot tiers (own or peer's), not S3."""
    config, trainers = start(shared, workdir, warm=False, per_node_fraction=0.55, node_count=2, ranks_per_node=2)
    try:
        placement = ray.get([t.node_id.remote() for t in trainers])
        epochs = []
        for epoch in range(2):
            epochs.append(summarize(ray.get([t.epoch.remote(epoch) for t in trainers])))
            time.sleep(0.6)  # epoch boundary: residency reaches the coordinator
        return {"placement": placement, "epochs": epochs}
    finally:
        end(config, trainers)


def scenario_node_loss(shared: Shared, workdir: str) -> dict:
    """Warm enabled; the third node is removed mid-epoch 2; survivors must finish exactly once.
    It removes a node of the shared cluster: it runs last (see ``ORDER``)."""
    # A shallow prefetch, so the survivors still need the lost node's blocks after it is gone.
    config, trainers = start(shared, workdir, warm=True, per_node_fraction=0.36, depth_blocks=2)
    try:
        lost_node = ray.get(trainers[2].node_id.remote())
        first = summarize(ray.get([t.epoch.remote(0) for t in trainers]))
        ray.get([t.land_warm_writes.remote() for t in trainers])  # warm writes and residency land now
        survivors = [t.epoch.remote(1, 0.3) for t in trainers[:2]]
        doomed = trainers[2].epoch.remote(1, 0.3)
        time.sleep(0.6)
        started = time.monotonic()
        shared.cluster.remove_node(shared.nodes[2])
        results = ray.get(survivors, timeout=240)
        elapsed = time.monotonic() - started
        try:
            ray.get(doomed, timeout=30)
            doomed_state = "finished"
        except Exception as exc:  # noqa: BLE001 - its node is gone: expected
            doomed_state = type(exc).__name__
        from tierload.config.loading import load_config
        from tierload.deploy.actors import coordinator_name

        coordinator = ray.get_actor(coordinator_name(load_config(config)), namespace="tierload")
        deadline = time.monotonic() + 30
        while True:
            coord = ray.get(coordinator.stats.remote())
            if lost_node in coord.forgotten_nodes or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return {"first": first, "survivors": summarize(results), "survivor_seconds": elapsed,
                "doomed": doomed_state, "lost_node": lost_node, "coordinator": coord.to_dict(),
                "expected": [sorted(r) for r in _expected_slices(1)]}
    finally:
        end(config, trainers, wait=False)  # the last scenario: the lost node's cache cannot be stopped


def _expected_slices(epoch: int) -> list[list[int]]:
    import numpy as np

    from tierload.data.order import epoch_order, rank_slice

    order = epoch_order(np.arange(SAMPLES), seed=0, epoch=epoch, shuffle="sample")
    return [rank_slice(order, rank=r, world_size=NODES, drop_last=False).tolist() for r in range(NODES)]


def scenario_serve(shared: Shared, workdir: str) -> dict:
    """``tierload serve`` starts the actors (idempotently), a job runs through them, ``status``
    reports per node, ``stop`` ends them."""
    import os
    import subprocess

    import yaml

    config, trainers = start(shared, workdir, warm=True, per_node_fraction=0.5, start_trainers=False)
    try:
        os.makedirs(workdir, exist_ok=True)
        path = f"{workdir}/service.yaml"
        with open(path, "w") as handle:
            yaml.safe_dump(config, handle)
        tierload = [sys.executable, "-m", "tierload.cli.main"]

        def cli(*args):
            proc = subprocess.run([*tierload, *args, "--address", shared.cluster.address, "--config", path],
                                  capture_output=True, text=True, timeout=180, env=dict(os.environ))
            return {"code": proc.returncode, "out": proc.stdout.strip(), "err": proc.stderr.strip()[-2000:]}

        first, second = cli("serve"), cli("serve")
        names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))
        trainers = [shared.trainer(i) for i in range(NODES)]
        ray.get([t.open.remote(i, "s3://multinode/ds", config, shared.s3.storage_options)
                 for i, t in enumerate(trainers)])
        job = summarize(ray.get([t.epoch.remote(0) for t in trainers]))
        ray.get([t.land_warm_writes.remote() for t in trainers])  # every warm write lands before status counts them
        names_after_job = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))
        status = cli("status", "--json")
        table = cli("status")
        # The job ends before `stop`: a job still running would take its node's cache over once the
        # service's is gone (a joiner's keeper does, by design), and `left` would list that one.
        ray.get([t.close.remote() for t in trainers], timeout=60)
        stopped = cli("stop")
        left = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))
        return {"serve": [first, second], "actors": names, "actors_after_job": names_after_job, "job": job,
                "status": json.loads(status["out"]) if status["code"] == 0 else status, "table": table["out"],
                "stop": stopped, "left": left}
    finally:
        end(config, trainers)


SCENARIOS = {"peer": scenario_peer, "peer_limit": scenario_peer_limit, "locality": scenario_locality,
             "node_loss": scenario_node_loss, "serve": scenario_serve}
# The order of a run: node_loss removes a node of the shared cluster, so it comes last.
ORDER = ("peer", "peer_limit", "locality", "serve", "node_loss")


def main(names: list[str], workdir: str) -> None:
    """Run ``names`` (in ``ORDER``) on one shared cluster, each in its own deployment under
    ``workdir/NAME``; print ``RESULT NAME JSON`` for each (``{"error": traceback}`` if it raised)."""
    import traceback

    unknown = set(names) - set(ORDER)
    if unknown:
        raise SystemExit(f"unknown scenario(s) {sorted(unknown)}; known: {', '.join(ORDER)}")
    shared = Shared()
    try:
        for name in (name for name in ORDER if name in names):
            try:
                result = SCENARIOS[name](shared, f"{workdir}/{name}")
            except Exception:  # noqa: BLE001 - reported to the test of that scenario, the others still run
                result = {"error": traceback.format_exc()}
            print(f"RESULT {name} " + json.dumps(result), flush=True)
    finally:
        shared.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main(sys.argv[1].split(","), sys.argv[2])
