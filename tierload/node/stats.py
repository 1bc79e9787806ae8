"""Counters of what a stream (one rank's epoch) or a whole node cache did."""

from __future__ import annotations

from collections import Counter

COUNTERS = (
    "accesses",             # planned block accesses of the epoch (runs)
    "hot_hits",             # ... served by a block already in (or on its way into) the hot tier
    "staged_hits",          # ... served by a copy the hot tier refused, held in memory while the window pins it
    "peer_hits",            # ... brought from another node's hot tier
    "warm_hits",            # ... brought from the warm tier
    "cold_misses",          # ... brought from the cold tier
    "cold_bytes",           # bytes read from the cold tier (the S3 bill)
    "cold_gets",            # GET requests to the cold tier
    "warm_bytes",           # bytes read from the warm tier
    "peer_bytes",           # frame payload bytes received from peer nodes (as sent: zstd or raw; headers not counted)
    "peer_served",          # blocks this node served to peers
    "peer_errors",          # peers that did not answer (the block came from warm or cold)
    "wire_raw_bytes",       # block bytes sent to consumers over the channel, before compression
    "wire_sent_bytes",      # ... frame payload bytes as sent (zstd or raw; headers not counted)
    "integrity_failures",   # copies dropped because they did not match their checksum
    "fetch_errors",         # fetches that failed (the error reached the consumer if it needed the block)
    "random_reads",         # samples read outside any stream (ds[i]); each is also one access above
    # Failed cold-tier requests by retry class (tierload.stores.cold.retry.Failure), and those sent again.
    "cold_errors_final", "cold_errors_transient", "cold_errors_throttled", "cold_errors_down",
    "cold_retries_transient", "cold_retries_throttled", "cold_retries_down",
)


def new_stats() -> Counter:
    """A zeroed counter set."""
    return Counter({name: 0 for name in COUNTERS})


def hit_ratios(stats: dict) -> dict[str, float]:
    """Fraction of accesses served from each tier: ``{"hot", "staged", "peer", "warm", "cold"}``.

    ``staged``: by a copy the hot tier refused, held in memory for the prefetch window's accesses
    (not a hot-tier hit: Belady's MIN at the hot capacity has no such copy).
    """
    accesses = stats.get("accesses", 0) or 0
    tiers = (("hot", "hits"), ("staged", "hits"), ("peer", "hits"), ("warm", "hits"), ("cold", "misses"))
    if not accesses:
        return {tier: 0.0 for tier, _ in tiers}
    return {tier: stats.get(f"{tier}_{kind}", 0) / accesses for tier, kind in tiers}


def wire_ratio(stats: dict) -> float:
    """Compression ratio achieved on the wire (raw bytes / sent bytes; 1.0 when nothing was sent)."""
    sent = stats.get("wire_sent_bytes", 0)
    return stats.get("wire_raw_bytes", 0) / sent if sent else 1.0
