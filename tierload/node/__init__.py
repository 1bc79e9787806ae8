"""The node cache: one Ray actor per node that owns the node's hot tier, prefetches the blocks its
streams will need next, admits and evicts them by policy, and reports to the coordinator."""
