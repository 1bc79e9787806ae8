"""Which jobs a node cache may serve a dataset's cached blocks to: each job's right to read the
dataset, checked once against the cold tier with that job's own credentials.

A dataset's blocks are shared by every job on a node cache; the right to read them is not (a
shared Ray service runs several teams' jobs as one Unix user). So each registration of a
dataset (:meth:`~tierload.node.node_cache.NodeCache.register_dataset`) is admitted here before
the job may open a stream of it: a HEAD of the dataset's first object, signed with the job's own
credentials (its :class:`~tierload.stores.cold.source.ColdSource`), at the version the manifest
recorded. An identity (:func:`~tierload.stores.cold.identity.identity_of`) the cold tier refuses
gets :class:`~tierload.errors.AccessDeniedError` naming the dataset's URL and no bytes; a passed
check is cached per (identity, object URL, object version), so a second registration of the same
job, or of another job with the same credentials, costs no request, and a changed first object
is checked again.

Every later call that serves bytes presents the job's identity again and is refused without it
(:class:`~tierload.errors.AccessDeniedError`, no bytes): a stream's join and each ``acquire``
must come from the job that opened the stream (:func:`require_owner`: a stream id seen in
``tierload status`` opens nothing), a sample read (``ds[i]``) from a job admitted to its dataset,
and a mixture's registration from a job admitted to every source with that source's own
identity (:meth:`AccessGate.admit_parts`).

Stores whose backend says rights are the process's own (``file://``: the Unix user every job of
the node cache shares, :attr:`~tierload.stores.cold.backend.ColdBackend.checks_access`) are
admitted without a request.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections import defaultdict

from tierload.data.blocks import Block
from tierload.errors import AccessDeniedError
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)


class AccessGate:
    """The identities admitted to each registered dataset (thread-safe; checks run outside any
    lock of the node cache, as they send a request)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checked: set[tuple[str, str, str]] = set()  # (identity, object URL, object version)
        self._admitted: defaultdict[str, set[str]] = defaultdict(set)  # dataset id -> identities

    def admit(self, dataset_id: str, identity: str, source: ColdSource, probe: Block | None) -> None:
        """Check that ``identity`` may read the dataset (once per identity and object version).

        Args:
            dataset_id: The registered dataset.
            identity: The job's identity (a hash; never the credentials).
            source: The dataset's cold source with the job's own credentials.
            probe: The dataset's first block, whose object is HEADed; None: nothing to check.

        Raises:
            AccessDeniedError: The cold tier refused the job's credentials on the object
                (naming the dataset's URL).
            BackendError: The check could not be made (endpoint unreachable, object gone...): the
                job is not admitted.
        """
        if probe is not None and source.backend.checks_access:
            checked = (identity, probe.url, probe.version)
            with self._lock:
                done = checked in self._checked
            if not done:
                try:
                    source.head(probe.url)
                except AccessDeniedError as exc:
                    log.warning("a job's credentials were refused on dataset %s (%s): its cached blocks are not "
                                "served to it", source.url, exc.message)
                    raise AccessDeniedError(
                        f"the cold tier refused this job's credentials on {probe.url}, so the node cache serves it "
                        f"no block of dataset {dataset_id}: give credentials that may read {source.url}",
                        tier="cold", url=source.url) from exc
                with self._lock:
                    self._checked.add(checked)
        with self._lock:
            self._admitted[dataset_id].add(identity)

    def admit_parts(self, dataset_id: str, identity: str, parts: tuple[tuple[str, str], ...], url: str) -> None:
        """Admit ``identity`` to a mixture's dataset if each part's identity was admitted to its part.

        Args:
            dataset_id: The mixture's dataset.
            identity: The job's identity for the mixture (its first source's).
            parts: ``((part dataset id, identity), ...)``, every source of the mixture.
            url: The mixture's first source URL (named in the error).

        Raises:
            AccessDeniedError: A part was not registered with that identity (or refused it).
        """
        for part_id, part_identity in parts:
            self.require(part_id, part_identity, url)
        with self._lock:
            self._admitted[dataset_id].add(identity)

    def admitted(self, dataset_id: str, identity: str) -> bool:
        """Whether ``identity`` passed :meth:`admit` for ``dataset_id``."""
        with self._lock:
            return identity in self._admitted.get(dataset_id, ())

    def require(self, dataset_id: str, identity: str, url: str) -> None:
        """Refuse a job not admitted to ``dataset_id``.

        Raises:
            AccessDeniedError: ``identity`` never passed :meth:`admit` for the dataset (it must
                register the dataset with its own credentials first), naming ``url``.
        """
        if not self.admitted(dataset_id, identity):
            raise AccessDeniedError(f"this job's credentials were not checked for dataset {dataset_id} on this node "
                                    "cache: register the dataset with them first (TieredDataset.start does)",
                                    tier="cold", url=url)


def require_owner(owner: str, identity: str, stream_id: str, url: str) -> None:
    """Refuse a call on a stream from another job than the one that opened it.

    Args:
        owner: The identity the stream was opened for.
        identity: The caller's identity.
        stream_id: The stream (named in the error).
        url: The stream's dataset URL (named in the error).

    Raises:
        AccessDeniedError: ``identity`` is not the stream's owner.
    """
    if not hmac.compare_digest(owner, identity):
        raise AccessDeniedError(f"stream {stream_id} belongs to another job's credentials: this node cache serves "
                                "its blocks to that job only; open a stream of your own (register the dataset with "
                                "your credentials first: TieredDataset.start does)", tier="cold", url=url)
