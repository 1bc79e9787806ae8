"""The one registry of tier policies: name -> how to build it, which tiers may run it, what it does.

Config validation, the live tiers (node cache, coordinator), the simulator and the CLI all
read :data:`POLICIES`; adding a policy is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from tierload.errors import ConfigError
from tierload.policies.base import Policy
from tierload.policies.clairvoyant import ClairvoyantPolicy, NextUseOracle
from tierload.policies.frequency import DecayingCounter
from tierload.policies.keep import KeepPolicy
from tierload.policies.lfu import LFUPolicy
from tierload.policies.lfu_size import DEFAULT_GET_COST_BYTES, SizeAwareLFUPolicy
from tierload.policies.lru import LRUPolicy

TIERS = ("hot", "warm")

# (counter, oracle, get_cost_bytes) -> policy
PolicyFactory = Callable[[DecayingCounter, "NextUseOracle | None", int], Policy]


@dataclass(frozen=True)
class PolicySpec:
    """One policy as the registry knows it.

    Attributes:
        name: The name written in configs (``policy.<tier>.eviction``) and on the CLI.
        factory: ``factory(counter, oracle, get_cost_bytes) -> Policy``.
        tiers: The tiers that may run it (a subset of :data:`TIERS`).
        description: One line for help texts.
        reads_counts: Its decisions read the decayed access counts (so they must be kept).
        needs_order: It needs the future access order (an oracle), which only a hot tier has.
    """

    name: str
    factory: PolicyFactory
    tiers: tuple[str, ...]
    description: str
    reads_counts: bool = False
    needs_order: bool = False


def _clairvoyant(counter: DecayingCounter, oracle: NextUseOracle | None, get_cost_bytes: int) -> Policy:
    if oracle is None:
        others = [spec.name for spec in POLICIES.values() if not spec.needs_order]
        raise ConfigError("policy 'clairvoyant' needs the future access order, which only a node's "
                          f"hot tier has; use {', '.join(others[:-1])} or {others[-1]} here")
    return ClairvoyantPolicy(oracle)


POLICIES: Mapping[str, PolicySpec] = {spec.name: spec for spec in (
    PolicySpec("clairvoyant", _clairvoyant, ("hot",),
               "Belady's MIN over the known access order: evicts what is needed furthest ahead",
               needs_order=True),
    PolicySpec("keep", lambda counter, oracle, cost: KeepPolicy(), TIERS,
               "keeps what it admitted and refuses newcomers once full (beats LRU on random epochs)"),
    PolicySpec("lfu", lambda counter, oracle, cost: LFUPolicy(counter), TIERS,
               "evicts the block with the fewest decayed accesses", reads_counts=True),
    PolicySpec("lfu-size", lambda counter, oracle, cost: SizeAwareLFUPolicy(counter, cost), TIERS,
               "LFU weighed by what a block costs to fetch again (bytes plus one GET)", reads_counts=True),
    PolicySpec("lru", lambda counter, oracle, cost: LRUPolicy(), TIERS,
               "evicts the least recently used block"),
)}
POLICY_NAMES = tuple(POLICIES)  # sorted, as the entries above are


def policy_names(tier: str | None = None) -> tuple[str, ...]:
    """Names of the policies ``tier`` may run (every policy when ``tier`` is None), sorted.

    Raises:
        ConfigError: ``tier`` is not one of :data:`TIERS`.
    """
    if tier is None:
        return POLICY_NAMES
    if tier not in TIERS:
        raise ConfigError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    return tuple(name for name, spec in POLICIES.items() if tier in spec.tiers)


def policy_spec(name: str) -> PolicySpec:
    """The registry entry of ``name``.

    Raises:
        ConfigError: Unknown name (the message lists the known ones).
    """
    try:
        return POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}") from None


def make_policy(name: str, *, counter: DecayingCounter, oracle: NextUseOracle | None = None,
                get_cost_bytes: int = DEFAULT_GET_COST_BYTES) -> Policy:
    """Build a policy by name.

    Args:
        name: One of :data:`POLICY_NAMES`.
        counter: Decayed access counts (read by ``lfu`` and ``lfu-size``).
        oracle: Future access order (needed by ``clairvoyant``).
        get_cost_bytes: What one GET weighs in bytes of transfer (read by ``lfu-size``).

    Raises:
        ConfigError: Unknown name, or ``clairvoyant`` without an oracle.
    """
    return policy_spec(name).factory(counter, oracle, get_cost_bytes)
