"""Who reads the cold tier: a job's identity as a hash of everything its cold location carries.

Bytes are shared, rights are not (docs/DESIGN.md, "Stores and identity"): a node cache shared by
several jobs reads the cold tier for each job with that job's own credentials, and serves a job
cached blocks of a dataset only once that job's credentials were checked against the source
(:mod:`tierload.node.access`). Jobs are told apart by :func:`identity_of`, a hash of their
:class:`~tierload.stores.cold.location.ColdLocation`'s options (keys, session token, profile,
endpoint, region, requester-pays, ...), captured credential chain and credential provider: the
credentials themselves never leave the location (never logged, never in stats or metrics), and the
hash cannot be turned back into them, nor made without them.
"""

from __future__ import annotations

import hashlib
import json

from tierload.stores.cold.location import ColdLocation

__all__ = ["identity_of"]

# Hex digits of the identity kept: 128 bits, collision-free for any number of jobs on one node.
_IDENTITY_HEX = 32


def identity_of(location: ColdLocation) -> str:
    """The identity a job reads ``location`` with: a hex digest of its options, credential chain and provider.

    Two locations with the same options (whatever their URL) are one identity; any difference in a
    credential, endpoint, profile or request option (e.g. ``requester_pays``) is another.

    Args:
        location: A resolved cold location (its options may hold credentials).

    Returns:
        32 hex characters (BLAKE2b of the options' canonical JSON; values JSON cannot spell are
        taken as their ``repr``).
    """
    canonical = json.dumps({"options": location.storage_options, "chain": location.credential_chain,
                            "provider": location.credential_provider},
                           sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=_IDENTITY_HEX // 2,
                           person=b"tierload-ident").hexdigest()
