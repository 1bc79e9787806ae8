"""The cold tier (the source of truth, read-only to us): listing, versioned range reads, the one
retry layer, and the range-read engines (obstore, aiobotocore) behind one interface."""
