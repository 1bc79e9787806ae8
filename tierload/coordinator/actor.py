"""The coordinator: one per cluster. Owns the warm tier, the cluster-wide access counts, and
the map of which node's hot tier holds which block.

Node caches talk to it in one batched call every ~0.2 s (:mod:`tierload.node.coordinator_sync`):
access counts, warm-write proposals, corrupt warm copies, changes to their hot residency, and
peers they found dead. The answer carries the warm admissions (room is made, victims deleted,
before any byte is written) and the changes to the holder map since the node's last call, so
every node keeps a replica of who holds what and fetches from a peer before going to S3.

State is rebuilt after a restart: the warm index from the warm store (read by
:meth:`Coordinator.start`; the constructor does no I/O), the holder map from the nodes, which
resend their full residency when they see a new ``incarnation``.

A warm tier that cannot be opened at start runs the cluster without a warm tier (warned once);
one whose victims cannot be deleted (read-only) admits nothing for ``warm.write_retry_s``,
its undeleted victims back in the index, so the index keeps matching what is stored.

This is a plain class; :mod:`tierload.deploy.runtime` makes it a named, detached Ray actor.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import defaultdict

from tierload.config.loading import as_config
from tierload.config.models import TierloadConfig
from tierload.errors import BackendError, ServiceError
from tierload.metrics.exporter import PeriodicExporter
from tierload.metrics.samples import coordinator_samples
from tierload.policies.counts import AccessCounts
from tierload.policies.frequency import DecayingCounter
from tierload.policies.registry import make_policy
from tierload.policies.tierindex import TierIndex
from tierload.stores.base import BlockStore
from tierload.stores.tier_writes import WriteHealth, open_warm_or_none, warn_if_larger_than_file_system
from tierload.wire.api import CoordinatorAPI
from tierload.wire.messages import SyncAnswer, SyncReport
from tierload.wire.stats import CoordinatorStats, WarmStats

log = logging.getLogger(__name__)

CHANGELOG_LIMIT = 200_000
LIVENESS_INTERVAL_S = 2.0


class Coordinator(CoordinatorAPI):
    """Warm-tier admission and eviction, cluster-wide frequencies, and the holder map.

    The cluster-wide counts aggregate the access counts that nodes report in their syncs (each
    node counts its own accesses, once, in its :class:`~tierload.node.accounting.NodeAccounting`);
    nothing is counted here that a node did not report.

    Args:
        config: The effective configuration (dict or :class:`TierloadConfig`).
        node_alive: Returns the ids of live nodes, or None when unknown (default: ask Ray).
    """

    def __init__(self, config: dict | TierloadConfig, node_alive=None) -> None:
        self.config = as_config(config)
        policy = self.config.policy
        self.incarnation = secrets.token_hex(8)
        self._lock = threading.RLock()
        self._reported = AccessCounts(DecayingCounter(policy.decay.half_life))  # node reports, not accesses
        self._counter = self._reported.counter
        self._store: BlockStore | None = None  # opened by start()
        self._index = None
        self._health = WriteHealth("warm", self.config.warm.write_retry_s)
        if self.config.warm.url:
            self._index = TierIndex("warm", self.config.warm.capacity_bytes, self._make_policy(policy.warm),
                                    self._reported, policy.warm.admit_min_count)
        self._holders: dict[str, set[str]] = {}
        self._node_keys: dict[str, set[str]] = defaultdict(set)
        self._changelog: list[tuple[int, str]] = []  # (version, key) of every holder change
        self._version = 0
        self._log_start = 0
        self._nodes: dict[str, float] = {}
        self._forgotten: set[str] = set()
        self._node_alive = node_alive or _ray_live_nodes
        self._liveness_checked = 0.0
        self._now = 0.0
        self._accesses = 0.0
        self._exporter: PeriodicExporter | None = None  # started by start()
        self._checksum_key: bytes | None = None

    def start(self) -> Coordinator:
        """Open the warm tier and adopt the blocks it holds (the overflow beyond capacity is deleted).

        Returns:
            This coordinator, started.

        Raises:
            BackendError: The warm tier cannot be listed.
        """
        store = (open_warm_or_none(self.config.warm.url, shared=self.config.warm.shared)
                 if self._index is not None else None)
        if store is not None and self._index is not None:
            if store.local_path is not None:
                warn_if_larger_than_file_system("warm", store.local_path, self._index.capacity_bytes)
            with self._lock:
                self._store = store
                for key, size in sorted(store.scan().items()):
                    if not self._index.add_existing(key, size, 0.0):
                        self._delete_warm(key)
        if self.config.metrics.enabled and self._exporter is None:
            self._exporter = PeriodicExporter(lambda: coordinator_samples(self.stats().to_dict()), "coordinator",
                                              self.config.metrics.export_interval_s).start()
        return self

    def ready(self) -> bool:
        return True

    def checksum_key(self, offered: bytes) -> bytes:
        """The deployment's checksum key, one for every node (:mod:`tierload.frames.checksum_key`).

        The warm tier's key when there is a warm tier; else the first key a node offers (each
        node keeps the key in its hot directory and offers it, so a restarted coordinator
        adopts the same one again and the nodes' hot copies and peer frames stay valid).

        Raises:
            IntegrityError: The warm tier's key file does not hold a key.
        """
        from tierload.frames.checksum_key import deployment_key

        with self._lock:
            if self._checksum_key is None:
                self._checksum_key = deployment_key(self.config.warm.url, "") if self.config.warm.url else offered
            return self._checksum_key

    def _make_policy(self, policy):
        return make_policy(policy.eviction, counter=self._counter, get_cost_bytes=policy.get_cost_bytes)

    def set_policy(self, policy: dict) -> dict:
        """Switch the warm tier's policy while running (from the next admission on).

        Raises:
            ConfigError: The policy is invalid; the old one stays in force.
        """
        new = as_config({**self.config.to_dict(), "policy": policy}).policy
        with self._lock:
            self.config = self.config.model_copy(update={"policy": new})
            self._counter.half_life = new.decay.half_life
            if self._index is not None:
                self._index.replace_policy(self._make_policy(new.warm), new.warm.admit_min_count, self._now)
        log.info("warm-tier policy is now %s", new.warm.eviction)
        return new.model_dump(mode="json")

    # ------------------------------------------------------------------ sync
    def sync(self, node_id: str, report: SyncReport) -> SyncAnswer:
        """Take one node's batch and answer it.

        Args:
            node_id: The reporting node.
            report: What the node learned since its last sync.

        Returns:
            The warm admissions (one ``granted``/``present`` per proposal) and the holder-map
            changes since ``report.since``.

        Raises:
            MessageError: ``report`` is not a :class:`SyncReport` of this release.
        """
        report = SyncReport.received(report)
        with self._lock:
            self._nodes[node_id] = time.time()
            self._forgotten.discard(node_id)
            clock = self._clock(report.now)
            for key, amount in report.counts.items():
                self._reported.record(key, clock, amount)
                self._accesses += amount
            self._apply_residency(node_id, report)
            for lost in report.lost:
                self._check_lost(lost)
            self._check_liveness()
            granted, present = self._admit_warm(report.proposals, report.drops, clock)
            holders, full = self._holders_since(report.since)
            return SyncAnswer(incarnation=self.incarnation, holders_version=self._version, granted=granted,
                              present=present, holders=holders, full=full)

    def commit(self, committed: list[str], aborted: list[str]) -> None:
        """Warm writes that completed (now readable) and that failed (space released)."""
        with self._lock:
            if self._index is None:
                return
            for key in committed:
                if key in self._index.reserved:
                    self._index.commit(key, self._now)
            if committed:
                self._health.succeeded()
            for key in aborted:
                self._index.abort(key)

    def invalidate(self, keys: list[str]) -> int:
        """Delete these blocks from the warm tier; returns how many were there."""
        with self._lock:
            return sum(self._drop_warm(key) for key in keys)

    def holders(self, keys: list[str]) -> dict[str, list[str]]:
        """Which nodes hold each of ``keys`` in their hot tier."""
        with self._lock:
            return {key: sorted(self._holders.get(key, ())) for key in keys}

    def forget_node(self, node_id: str) -> int:
        """Drop everything known about ``node_id`` (it left the cluster); returns blocks forgotten."""
        with self._lock:
            keys = self._node_keys.pop(node_id, set())
            for key in keys:
                self._set_holder(key, node_id, False)
            self._nodes.pop(node_id, None)
            self._forgotten.add(node_id)
            if keys:
                log.warning("forgot node %s and the %d blocks it held", node_id, len(keys))
            return len(keys)

    def stats(self) -> CoordinatorStats:
        """Warm-tier usage, nodes seen, and the size of the holder map."""
        with self._lock:
            warm = WarmStats(**self._index.stats(), **self._health.stats()) if self._index is not None else None
            return CoordinatorStats(warm=warm, nodes={node: len(self._node_keys.get(node, ())) for node in self._nodes},
                                    forgotten_nodes=tuple(sorted(self._forgotten)), accesses=self._accesses,
                                    tracked_blocks=len(self._counter), held_blocks=len(self._holders),
                                    clock=self._now, incarnation=self.incarnation)

    # -------------------------------------------------------------- internals
    def _clock(self, reported: float) -> float:
        if self.config.policy.decay.unit == "second":
            return time.time()
        self._now = max(self._now, reported)
        return self._now

    def _admit_warm(self, proposals, drops, clock) -> tuple[list[bool], list[bool]]:
        if self._index is None or self._store is None:
            return [False] * len(proposals), [False] * len(proposals)
        for key in drops:
            self._drop_warm(key)
        granted, present = [], []
        for key, size in proposals:
            present.append(key in self._index)
            granted.append(self._reserve_warm(key, size, clock))
        return granted, present

    def _reserve_warm(self, key: str, size: int, clock: float) -> bool:
        """Reserve room for ``key``, victims deleted; False if refused or the tier refuses writes."""
        index = self._index
        if index is None or key in index or key in index.reserved or not self._health.admitting():
            return False
        admission = index.reserve(key, size, clock)
        for position, victim in enumerate(admission.victims):
            if not self._delete_warm(victim):
                index.abort(key)
                for kept in admission.victims[position:]:
                    self._readmit(index, kept, clock)
                return False
        if admission.victims:
            self._health.succeeded()
        if admission.admitted:
            self._health.trying()
        return admission.admitted

    def _readmit(self, index: TierIndex, key: str, clock: float) -> None:
        """Put a victim whose file could not be deleted back in the index (it is still stored)."""
        if self._store is None:
            return
        try:
            index.readmit(key, self._store.size(key), clock)
        except (KeyError, BackendError):
            pass  # gone after all (or unreadable): it stays out of the index

    def _drop_warm(self, key: str) -> int:
        if self._index is None or self._store is None:
            return 0
        removed = self._index.remove(key)
        self._delete_warm(key)  # a corrupt or stale copy that cannot be deleted leaves the index all the same
        return int(removed)

    def _delete_warm(self, key: str) -> bool:
        """Delete a warm file; False (the tier paused, the cause logged once) if it cannot be."""
        if self._store is None:
            raise ServiceError("the coordinator was not started (call start() before sync)")
        try:
            self._store.delete(key)
        except BackendError as exc:
            self._health.failed(exc)
            return False
        return True

    def _apply_residency(self, node_id: str, report: SyncReport) -> None:
        full = report.hot_full
        if full is not None:
            current = self._node_keys.get(node_id, set())
            wanted = set(full)
            for key in current - wanted:
                self._set_holder(key, node_id, False)
            for key in wanted - current:
                self._set_holder(key, node_id, True)
        for key in report.hot_added:
            self._set_holder(key, node_id, True)
        for key in report.hot_removed:
            self._set_holder(key, node_id, False)

    def _set_holder(self, key: str, node_id: str, held: bool) -> None:
        holders = self._holders.get(key, set())
        if held == (node_id in holders):
            return
        if held:
            self._holders.setdefault(key, set()).add(node_id)
            self._node_keys[node_id].add(key)
        else:
            holders.discard(node_id)
            self._node_keys[node_id].discard(key)
            if not holders:
                del self._holders[key]
        self._version += 1
        self._changelog.append((self._version, key))
        if len(self._changelog) > CHANGELOG_LIMIT:
            drop = len(self._changelog) - CHANGELOG_LIMIT // 2
            self._log_start = self._changelog[drop - 1][0]
            del self._changelog[:drop]

    def _holders_since(self, since: int) -> tuple[dict[str, list[str]], bool]:
        if since < self._log_start or since < 0:
            return {key: sorted(nodes) for key, nodes in self._holders.items()}, True
        changed = {key for version, key in self._changelog if version > since}
        return {key: sorted(self._holders.get(key, ())) for key in changed}, False

    def _check_lost(self, node_id: str) -> None:
        alive = self._node_alive()
        if alive is None or node_id not in alive:
            self.forget_node(node_id)

    def _check_liveness(self) -> None:
        now = time.monotonic()
        if now - self._liveness_checked < LIVENESS_INTERVAL_S:
            return
        self._liveness_checked = now
        alive = self._node_alive()
        if alive is None:
            return
        for node_id in list(self._node_keys):
            if node_id not in alive:
                self.forget_node(node_id)


def _ray_live_nodes() -> set[str] | None:
    """Ids of the Ray nodes that are alive, or None outside Ray."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        return {node["NodeID"] for node in ray.nodes() if node.get("Alive")}
    except Exception:  # noqa: BLE001 - liveness is advisory; never fail a sync over it
        log.debug("cannot list Ray nodes", exc_info=True)
        return None
