"""Deployment: finding, starting, owning and keeping the node caches and the coordinator on Ray;
`tierload serve/status/stop` and `tierload warm`."""
