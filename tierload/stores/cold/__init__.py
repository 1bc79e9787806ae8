"""The cold tier (the source of truth, read-only to us): listing, versioned range reads, the one
retry layer, and the S3 fast path (`s3fast/`) behind the same interface."""
