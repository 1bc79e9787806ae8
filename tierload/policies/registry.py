"""One registry: policy name -> class."""

from __future__ import annotations

from tierload.errors import ConfigError
from tierload.policies.base import Policy
from tierload.policies.clairvoyant import ClairvoyantPolicy, NextUseOracle
from tierload.policies.frequency import DecayingCounter
from tierload.policies.keep import KeepPolicy
from tierload.policies.lfu import LFUPolicy
from tierload.policies.lru import LRUPolicy

POLICY_NAMES = ("clairvoyant", "keep", "lfu", "lru")


def make_policy(name: str, *, counter: DecayingCounter, oracle: NextUseOracle | None = None) -> Policy:
    """Build a policy by name.

    Raises:
        ConfigError: Unknown name, or ``clairvoyant`` without an oracle.
    """
    if name == "lru":
        return LRUPolicy()
    if name == "lfu":
        return LFUPolicy(counter)
    if name == "keep":
        return KeepPolicy()
    if name == "clairvoyant":
        if oracle is None:
            raise ConfigError("policy 'clairvoyant' needs the future access order, which only a node's "
                              "hot tier has; use lru, lfu or keep here")
        return ClairvoyantPolicy(oracle)
    raise ConfigError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
