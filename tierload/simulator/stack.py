"""What the simulator replays through and what it reports: the stack of tiers
(:class:`StackSpec`) and one replay's counts (:class:`SimResult`), shared by the reference
replay (:mod:`tierload.simulator.run`) and the compiled one (:mod:`tierload.simulator.fast`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from tierload.config.models import TierloadConfig
from tierload.policies.registry import policy_spec


@dataclass(frozen=True)
class StackSpec:
    """The tiers to simulate and their policies.

    Attributes:
        hot_policy: Eviction policy of every node's hot tier.
        hot_capacity_bytes: Capacity of each node's hot tier.
        warm_policy: Eviction policy of the shared warm tier, or None for no warm tier.
        warm_capacity_bytes: Capacity of the warm tier.
        hot_admit_min_count, warm_admit_min_count: Decayed accesses a block needs before it
            is admitted (``policy.<tier>.admit_min_count``).
        hot_get_cost_bytes, warm_get_cost_bytes: ``policy.<tier>.get_cost_bytes`` (lfu-size).
        half_life: ``policy.decay.half_life``, in epochs.
        max_request_bytes: ``cold.max_request_bytes`` (a larger block costs several GETs).
    """

    hot_policy: str
    hot_capacity_bytes: int
    warm_policy: str | None = None
    warm_capacity_bytes: int = 0
    hot_admit_min_count: float = 1.0
    warm_admit_min_count: float = 1.0
    hot_get_cost_bytes: int = 2**20
    warm_get_cost_bytes: int = 2**20
    half_life: float = 4.0
    max_request_bytes: int = 64 * 2**20

    @classmethod
    def from_config(cls, config: TierloadConfig, *, hot_capacity_bytes: int | None = None,
                    warm_capacity_bytes: int | None = None) -> "StackSpec":
        """The stack a configuration describes; capacities default to the configured ones.

        A zero warm capacity gives no warm tier, and so does ``warm.url: null`` unless
        ``warm_capacity_bytes`` is given.
        """
        policy = config.policy
        warm_bytes = config.warm.capacity_bytes if warm_capacity_bytes is None else warm_capacity_bytes
        has_warm = (bool(config.warm.url) or warm_capacity_bytes is not None) and warm_bytes > 0
        return cls(hot_policy=policy.hot.eviction,
                   hot_capacity_bytes=config.hot.capacity_bytes if hot_capacity_bytes is None else hot_capacity_bytes,
                   warm_policy=policy.warm.eviction if has_warm else None,
                   warm_capacity_bytes=warm_bytes if has_warm else 0,
                   hot_admit_min_count=policy.hot.admit_min_count, warm_admit_min_count=policy.warm.admit_min_count,
                   hot_get_cost_bytes=policy.hot.get_cost_bytes, warm_get_cost_bytes=policy.warm.get_cost_bytes,
                   half_life=policy.decay.half_life, max_request_bytes=config.cold.max_request_bytes)

    def with_policies(self, hot: str, warm: str | None) -> "StackSpec":
        return replace(self, hot_policy=hot, warm_policy=warm if self.warm_policy is not None else None)


@dataclass
class SimResult:
    """What one stack did with one trace.

    Attributes:
        hot_policy, warm_policy: The policies (warm None: no warm tier).
        accesses: Accesses replayed.
        hot_hits: Accesses served by the node's hot tier.
        warm_hits: Hot misses served by the warm tier.
        cold_misses: Hot misses read from cold.
        cold_bytes: Bytes read from cold.
        cold_gets: GET requests to cold.
        hot_promotions: Blocks admitted into a hot tier.
        hot_demotions: Blocks evicted from a hot tier (offered to warm).
        warm_promotions: Blocks admitted into the warm tier (from cold, or demoted from hot).
        warm_demotions: Blocks evicted from the warm tier (dropped).
        seconds: Wall time of the replay.
        cpu_seconds: CPU time of the replay (what "accesses per second on one core" divides by).
    """

    hot_policy: str
    warm_policy: str | None
    accesses: int = 0
    hot_hits: int = 0
    warm_hits: int = 0
    cold_misses: int = 0
    cold_bytes: int = 0
    cold_gets: int = 0
    hot_promotions: int = 0
    hot_demotions: int = 0
    warm_promotions: int = 0
    warm_demotions: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def hot_hit_ratio(self) -> float:
        return self.hot_hits / self.accesses if self.accesses else 0.0

    @property
    def warm_hit_ratio(self) -> float:
        """Share of hot misses the warm tier served."""
        misses = self.warm_hits + self.cold_misses
        return self.warm_hits / misses if misses else 0.0

    @property
    def accesses_per_s(self) -> float:
        """Accesses replayed per second of CPU time."""
        return self.accesses / self.cpu_seconds if self.cpu_seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "hot_hit_ratio": self.hot_hit_ratio, "warm_hit_ratio": self.warm_hit_ratio,
                "accesses_per_s": self.accesses_per_s}


def counts_matter(policy: str, admit_min_count: float) -> bool:
    """Whether a tier's decisions read its access counts.

    Only the frequency policies and an admission threshold above one access do: right after
    an access a block's count is at least 1, so ``admit_min_count <= 1`` always passes.
    """
    return policy_spec(policy).reads_counts or admit_min_count > 1.0
