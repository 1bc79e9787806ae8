"""The cluster coordinator: one named Ray actor that owns the warm tier and the cluster-wide access
counts, plans promotions and demotions, and knows which node holds which block."""
