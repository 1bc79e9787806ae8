"""One registry: policy name -> class."""

from __future__ import annotations

from tierload.errors import ConfigError
from tierload.policies.base import Policy
from tierload.policies.clairvoyant import ClairvoyantPolicy, NextUseOracle
from tierload.policies.frequency import DecayingCounter
from tierload.policies.keep import KeepPolicy
from tierload.policies.lfu import LFUPolicy
from tierload.policies.lfu_size import DEFAULT_GET_COST_BYTES, SizeAwareLFUPolicy
from tierload.policies.lru import LRUPolicy

POLICY_NAMES = ("clairvoyant", "keep", "lfu", "lfu-size", "lru")


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
    if name == "lru":
        return LRUPolicy()
    if name == "lfu":
        return LFUPolicy(counter)
    if name == "lfu-size":
        return SizeAwareLFUPolicy(counter, get_cost_bytes)
    if name == "keep":
        return KeepPolicy()
    if name == "clairvoyant":
        if oracle is None:
            raise ConfigError("policy 'clairvoyant' needs the future access order, which only a node's "
                              "hot tier has; use lru, lfu, lfu-size or keep here")
        return ClairvoyantPolicy(oracle)
    raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
