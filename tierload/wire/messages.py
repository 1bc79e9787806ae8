"""What crosses a process boundary between tierload's processes: small frozen, versioned values.

The training process and its DataLoader workers talk to their node cache over the local
channel, node caches talk to the coordinator through Ray, and a restarted cache is found
through the endpoint file it publishes. Every such message is one of these classes; each
carries the ``version`` of its shape, checked on receipt with :meth:`Message.received`, so two
tierload releases that disagree fail with a :class:`~tierload.errors.MessageError` naming
both versions instead of a ``KeyError`` deep inside a thread.

    StreamPlan           consumer -> node cache   a rank's block sequence for one epoch
    SeededStreamPlan     consumer -> node cache   the same, as the seeds the cache derives it from
    DatasetRegistration  consumer -> node cache   a dataset's cold location, this job's; its manifest file or BlockTable
    SyncReport           node cache -> coordinator  what the node learned since its last sync
    SyncAnswer           coordinator -> node cache  warm admissions and holder-map changes
    Endpoint             node cache -> consumers  where the cache listens (also as a JSON file)
    HotBlock, WireBlock  node cache -> consumer   where an acquired block is: a hot level, or its frame
    SampleRead           consumer -> node cache   one sample's block (and pack member) for ``ds[i]``
    MemberFrame          node cache -> consumer   a pack member's bytes, read alone
    ChannelCall          client -> channel server  one call of an interface (tierload.wire.api)
    LoopReport           consumer -> node cache   a rank's stall figures, from a job without Ray
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Sequence, TypeVar

import numpy as np

from tierload.data.blocks import Block
from tierload.errors import MessageError

if TYPE_CHECKING:  # annotations only: the S3 stack (aiohttp) and pyarrow (packs) stay unimported for who
    # reads an endpoint (a service host, the CLI)
    from tierload.data.packs import PackMembers
    from tierload.stores.cold.location import ColdLocation

M = TypeVar("M", bound="Message")


@dataclass(frozen=True)
class Message:
    """Base of every message; ``VERSION`` is the shape this process understands."""

    VERSION: ClassVar[int] = 1

    @classmethod
    def received(cls: type[M], message: Any) -> M:
        """Return ``message`` if it is a ``cls`` of this process's version.

        Raises:
            MessageError: It is another type, or a ``cls`` of another version.
        """
        if not isinstance(message, cls):
            raise MessageError(f"expected a {cls.__name__} (version {cls.VERSION}), got {type(message).__name__}")
        version = getattr(message, "version", None)
        if version != cls.VERSION:
            raise MessageError(f"{cls.__name__} version {version} received; this process understands version "
                               f"{cls.VERSION} (are all processes running the same tierload release?)")
        return message


@dataclass(frozen=True, eq=False)
class StreamPlan(Message):
    """The block sequence a node cache prefetches for one rank's iteration of an epoch.

    Attributes:
        dataset_id: The registered dataset the blocks belong to.
        epoch: The epoch (also the decay clock in ``epoch`` units).
        seq: int32 array (positions,): block index needed at each position; the first
            ``consume_len`` are this iteration's, the rest a look-ahead into the next epoch that
            only informs eviction.
        consume_len: Positions this iteration consumes.
        reuse_gap: A block needed again within this many positions continues its run.
        start: First position still to be consumed (a resumed iteration skips the rest).
        lineage: Same for every epoch of one (dataset, seed, rank, world size); empty: the stream id.
        identity: The job's identity (:func:`~tierload.stores.cold.identity.identity_of` of the cold
            location it registered the dataset with; a hash, never the credentials): the stream is
            opened only for an identity the node cache admitted to the dataset, and its cold reads
            use that identity's credentials. A join of the stream and every acquire must present
            the same identity: the node cache serves a stream's blocks to its own job only.
        version: Shape of this message (2: ``identity`` added).
    """

    VERSION: ClassVar[int] = 2

    dataset_id: str
    epoch: int
    seq: np.ndarray
    consume_len: int
    reuse_gap: int = 1
    start: int = 0
    lineage: str = ""
    identity: str = ""
    version: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "seq", np.ascontiguousarray(self.seq, dtype=np.int32))
        if not 0 <= self.consume_len <= len(self.seq):
            raise MessageError(f"StreamPlan.consume_len={self.consume_len} outside 0..{len(self.seq)} (len(seq))")


@dataclass(frozen=True)
class SeededStreamPlan(Message):
    """A rank's epoch as the few numbers its :class:`StreamPlan` derives from: the node cache,
    which maps the same manifest file, computes the plan (:mod:`tierload.node.plan_expansion`),
    so no training process or DataLoader worker builds two epoch orders and an 8 MB sequence per
    million samples (``benchmarks/results/2026-12-03-plan-in-cache``). Sent only for one dataset
    in tierload's own order (no sampler, no mixture, not an epoch resumed at another world
    size), registered by its manifest file.

    Attributes:
        dataset_id: The registered dataset.
        epoch: The epoch (its order, and the next one's for the look-ahead).
        seed, shuffle, window_blocks, drop_last: The dataset's order settings (``shuffle``
            resolved: ``"none"``, ``"sample"`` or ``"block"``; see :func:`tierload.data.order.epoch_order`).
        samples: The job's manifest's :attr:`~tierload.data.manifest.Manifest.samples_digest`:
            the cache derives the plan over the sample -> block column with this digest.
        rank, world: This rank and the world size (:func:`tierload.data.order.rank_slice`).
        start_sample: Where this iteration begins in the rank's order (a resumed iteration's
            ``start``): the plan covers ``order[start_sample:]``.
        start, lineage, identity: As :class:`StreamPlan`'s.
        version: Shape of this message.
    """

    dataset_id: str
    samples: str
    epoch: int
    seed: int
    shuffle: str
    window_blocks: int
    drop_last: bool
    rank: int
    world: int
    start_sample: int = 0
    start: int = 0
    lineage: str = ""
    identity: str = ""
    version: int = 1


@dataclass(frozen=True, eq=False)
class BlockTable(Message):
    """A dataset's blocks as columns (one entry per block, in block-index order).

    Attributes:
        keys, urls, versions: Tier key, source URL and source version of each block.
        offsets, lengths: int64 arrays (blocks,): byte range of each block in its object.
        members: ``{block index: PackMembers}`` for the blocks that are packs.
        version: Shape of this message.
    """

    keys: tuple[str, ...]
    urls: tuple[str, ...]
    versions: tuple[str, ...]
    offsets: np.ndarray
    lengths: np.ndarray
    members: dict[int, PackMembers] = field(default_factory=dict)
    version: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", np.ascontiguousarray(self.offsets, dtype=np.int64))
        object.__setattr__(self, "lengths", np.ascontiguousarray(self.lengths, dtype=np.int64))
        sizes = {len(self.keys), len(self.urls), len(self.versions), len(self.offsets), len(self.lengths)}
        if len(sizes) != 1:
            raise MessageError(f"BlockTable columns differ in length: keys={len(self.keys)}, urls={len(self.urls)}, "
                               f"versions={len(self.versions)}, offsets={len(self.offsets)}, "
                               f"lengths={len(self.lengths)}")

    @classmethod
    def of(cls, blocks: Sequence[Block]) -> "BlockTable":
        """The table of ``blocks`` (in their order)."""
        return cls(tuple(b.key for b in blocks), tuple(b.url for b in blocks), tuple(b.version for b in blocks),
                   np.fromiter((b.offset for b in blocks), np.int64, len(blocks)),
                   np.fromiter((b.length for b in blocks), np.int64, len(blocks)),
                   {index: b.members for index, b in enumerate(blocks) if b.members is not None})

    def __len__(self) -> int:
        return len(self.keys)

    def blocks(self) -> list[Block]:
        """The blocks again, in their order."""
        rows = zip(self.keys, self.urls, self.versions, self.offsets.tolist(), self.lengths.tolist(), strict=True)
        return [Block(key, url, version, int(offset), int(length), self.members.get(index))
                for index, (key, url, version, offset, length) in enumerate(rows)]


@dataclass(frozen=True, eq=False)
class DatasetRegistration(Message):
    """Tells a node cache where a dataset's blocks come from, and with whose credentials this job reads them.

    Every job registers the datasets it reads, even one the cache knows already: the cache checks the
    job's right to read with ``cold`` (:mod:`tierload.node.access`) and reads for its streams with it.

    Attributes:
        dataset_id: The manifest's dataset id.
        cold: The dataset's cold location with this job's credentials, requester-pays, endpoint,
            profile (its options stay out of every ``repr``).
        blocks: The dataset's blocks (may be empty when ``manifest_path`` names them).
        manifest_path: The dataset's cached manifest file on this node, which the cache maps
            instead of receiving the blocks (None: the blocks travel in ``blocks``).
        parts: A mixture's sources, ``((dataset_id, identity), ...)``: each source's registered
            dataset and the identity (:func:`~tierload.stores.cold.identity.identity_of`) of this
            job's cold location for it. The job is admitted to the mixture only if it was admitted
            to every part with that identity, and a block of the mixture is read from cold with the
            identity of the part that holds it. Empty: not a mixture.
        version: Shape of this message (2: ``parts`` added).
    """

    VERSION: ClassVar[int] = 2

    dataset_id: str
    cold: ColdLocation
    blocks: BlockTable
    manifest_path: str | None = None
    parts: tuple[tuple[str, str], ...] = ()
    version: int = 2


@dataclass(frozen=True)
class SyncReport(Message):
    """What one node cache learned since its last sync with the coordinator.

    Attributes:
        counts: Accesses per block key since the last report.
        now: The node's decay clock (epochs or seconds).
        proposals: ``(key, stored_size_bytes)`` of blocks proposed for the warm tier.
        drops: Keys of warm copies the node found corrupt.
        hot_added, hot_removed: Changes to the node's hot residency.
        hot_full: The node's complete hot residency (after a restart of either side), or None.
        lost: Peers that did not answer.
        since: The holder-map version the node has (-1: none).
        version: Shape of this message.
    """

    counts: dict[str, int] = field(default_factory=dict)
    now: float = 0.0
    proposals: list[tuple[str, int]] = field(default_factory=list)
    drops: list[str] = field(default_factory=list)
    hot_added: list[str] = field(default_factory=list)
    hot_removed: list[str] = field(default_factory=list)
    hot_full: list[str] | None = None
    lost: list[str] = field(default_factory=list)
    since: int = -1
    version: int = 1


@dataclass(frozen=True)
class SyncAnswer(Message):
    """The coordinator's answer to a :class:`SyncReport`.

    Attributes:
        incarnation: Changes when the coordinator restarts (the node then resends its residency).
        holders_version: The holder-map version this answer brings the node to.
        granted: One bool per proposal: room was made, write the block to the warm tier.
        present: One bool per proposal: the warm tier already holds the block.
        holders: ``{key: [node ids]}`` changed since ``since`` (or all of them when ``full``).
        full: ``holders`` is the complete map rather than a delta.
        version: Shape of this message.
    """

    incarnation: str
    holders_version: int
    granted: list[bool]
    present: list[bool]
    holders: dict[str, list[str]]
    full: bool
    version: int = 1


@dataclass(frozen=True)
class LoopReport(Message):
    """What one rank's training loop measured since its last report, sent by a job that is not
    connected to Ray (it joined a running service or another job's cache), so the node cache
    exports the rank's stall metrics for it (:mod:`tierload.loader.stall`).

    Attributes:
        rank: The training rank.
        dataset_id: The dataset's id.
        stall_s: Seconds the loop waited in ``next()`` since the last report (>= 0).
        loop_s: Wall seconds of the loop since the last report (>= 0).
        samples: Samples the loop received since the last report (>= 0).
        version: Shape of this message.
    """

    rank: int
    dataset_id: str
    stall_s: float
    loop_s: float
    samples: int
    version: int = 1


@dataclass(frozen=True)
class Endpoint(Message):
    """Where consumers on a node find its cache.

    Attributes:
        address: Unix socket path of the cache's channel.
        authkey: The channel's secret (never in a ``repr``).
        node_id: The cache's node.
        hot_dirs: The hot tier's level directories, fastest first (the last holds the endpoint file).
        pid: The cache's process id.
        version: Shape of this message.
    """

    address: str
    authkey: bytes = field(repr=False)
    node_id: str
    hot_dirs: tuple[str, ...]
    pid: int
    version: int = 1

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form (``authkey`` as hex)."""
        return {"version": self.version, "address": self.address, "authkey": self.authkey.hex(),
                "node_id": self.node_id, "hot_dirs": list(self.hot_dirs), "pid": self.pid}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Endpoint":
        """Inverse of :meth:`to_json`.

        Raises:
            MessageError: Another version wrote it.
            KeyError, ValueError: It is not an endpoint.
        """
        endpoint = cls(str(data["address"]), bytes.fromhex(data["authkey"]), str(data["node_id"]),
                       tuple(data["hot_dirs"]), int(data["pid"]), int(data.get("version", 0)))
        return cls.received(endpoint)


@dataclass(frozen=True)
class HotBlock(Message):
    """An acquired block is in the hot tier: read its file from hot level ``level``.

    Attributes:
        level: Index of the hot level (fastest first) holding the block's file.
        version: Shape of this message.
    """

    level: int
    version: int = 1


@dataclass(frozen=True)
class WireBlock(Message):
    """An acquired block the hot tier did not admit: its frame travels with the answer.

    Attributes:
        frame: The block's frame (:mod:`tierload.frames.blockfile`: header, keyed checksum, codec).
        version: Shape of this message.
    """

    frame: bytes = field(repr=False)
    version: int = 1


@dataclass(frozen=True)
class SampleRead(Message):
    """One sample wanted now, outside any stream (``ds[i]``): its block, and its member when the
    block is a pack and the layout decodes a member alone.

    Attributes:
        dataset_id: The registered dataset the block belongs to.
        key: The block's tier key.
        member: Index of the sample's member in the pack (None: the whole block is wanted).
        identity: The reading job's identity (as :attr:`StreamPlan.identity`): the node cache
            serves the sample only to an identity it admitted to the dataset.
        version: Shape of this message (2: ``identity`` added).
    """

    VERSION: ClassVar[int] = 2

    dataset_id: str
    key: str
    member: int | None = None
    identity: str = ""
    version: int = 2


@dataclass(frozen=True)
class MemberFrame(Message):
    """A pack member's bytes, read alone (a ranged read, or cut from a copy above cold).

    Attributes:
        frame: The member's bytes as a frame (:mod:`tierload.frames.blockfile`) keyed by
            :func:`member_key` of the block's key and the member.
        version: Shape of this message.
    """

    frame: bytes = field(repr=False)
    version: int = 1


def member_key(key: str, member: int) -> str:
    """The frame key of member ``member`` of the pack ``key`` (its checksum binds both)."""
    return f"{key}#member-{member}"


@dataclass(frozen=True)
class ChannelCall(Message):
    """One call sent over the local channel.

    Attributes:
        method: The interface method's name (:func:`tierload.wire.api.call_name`); the server
            serves only the names its interface declares.
        args, kwargs: The call's arguments (messages of this module, or plain values).
        oneway: No answer is sent back (errors are logged by the server).
        version: Shape of this message.
    """

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    oneway: bool = False
    version: int = 1


@dataclass(frozen=True)
class CacheRequest(Message):
    """A training process without Ray asks its service host (:mod:`tierload.deploy.host`) to find or
    start this node's cache for a deployment.

    Attributes:
        request_id: Echoed in the answer: an answer to an earlier request (one whose caller was
            interrupted while it waited) is told apart and dropped.
        config: The deployment's resolved configuration, in its dict form (no defaults or
            environment are applied again in the host).
        version: Shape of this message.
    """

    request_id: int
    config: dict[str, Any]
    version: int = 1


@dataclass(frozen=True)
class CacheAnswer(Message):
    """The service host's answer to a :class:`CacheRequest`.

    Attributes:
        request_id: The request's :attr:`CacheRequest.request_id`.
        endpoint: The cache's endpoint, or None when ``error`` is set.
        error: What finding or starting it raised (a :class:`~tierload.errors.TierloadError`).
        version: Shape of this message.
    """

    request_id: int
    endpoint: Endpoint | None
    error: BaseException | None
    version: int = 1
