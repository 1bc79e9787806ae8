"""The wire between processes: frozen, versioned messages, the local channel, the endpoint a node
cache publishes, and the typed client of the node cache."""
