"""``tierload bench --workload mixture``: two sources 70/30 over the emulated S3 (issue 22, item 6)."""
