"""Bytes: the one frame (header, keyed checksum, codec) a block has on every tier, on the wire and
to peers, and the deployment's checksum key."""
