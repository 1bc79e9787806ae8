"""The datasets a node cache knows: their blocks in plan order, and where each block comes from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tierload.data.block_columns import block_lengths
from tierload.data.blocks import Block
from tierload.data.cold_read import read_cold, read_cold_async
from tierload.node.key_index import KeyIndex, key_hash
from tierload.stores.cold.source import ColdSource


@dataclass
class _Dataset:
    keys: KeyIndex
    source: ColdSource
    sizes: np.ndarray = field(init=False)
    # identity -> the cold source with that job's credentials (tierload.stores.cold.identity)
    sources: dict[str, ColdSource] = field(default_factory=dict)
    # identity -> {dataset id: identity}: whose credentials read each part of a mixture (see readers_of)
    readers: dict[str, dict[str, str]] = field(default_factory=dict)
    # samples digest -> the block of each sample, from the manifest files this cache mapped
    # (empty: the blocks were sent); one dataset's blocks may be cut into samples more than one way
    sample_blocks: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def blocks(self) -> Sequence[Block]:
        return self.keys.blocks

    def __post_init__(self) -> None:
        self.sizes = np.array(block_lengths(self.blocks), dtype=np.int64)  # a copy: the mapping may close


class BlockCatalog:
    """Registered datasets, and their blocks by key (no lock; the node cache holds its own).

    A block is found by key through each dataset's :class:`~tierload.node.key_index.KeyIndex`
    (16 bytes per block), never a dict of every block; a ``Block`` is made when one is asked for.
    """

    def __init__(self) -> None:
        self._datasets: dict[str, _Dataset] = {}

    def __contains__(self, dataset_id: str) -> bool:
        return dataset_id in self._datasets

    def add(self, dataset_id: str, keys: KeyIndex, source: ColdSource) -> None:
        """Register a dataset, its blocks as ``keys`` indexes them (a second registration of the
        same id changes nothing). The caller builds ``KeyIndex(blocks)`` before taking the node
        cache's lock: 0.5 s at a million blocks."""
        if dataset_id in self._datasets:
            return
        self._datasets[dataset_id] = _Dataset(keys, source)

    def add_identity(self, dataset_id: str, identity: str, source: ColdSource,
                     parts: Mapping[str, str] | None = None) -> None:
        """Read a registered dataset's blocks with ``source`` for streams of ``identity`` (the first
        source given for an identity stays); a mixture's with ``parts`` (``{part dataset id:
        identity}``: each block with the identity its job registered the part under)."""
        dataset = self._datasets[dataset_id]
        dataset.sources.setdefault(identity, source)
        if parts:
            dataset.readers.setdefault(identity, dict(parts))

    def readers_of(self, dataset_id: str, identity: str) -> dict[str, str]:
        """``{dataset id: identity}`` whose sources read the blocks of ``identity``'s streams of a
        registered dataset: a mixture's parts as registered, else the dataset itself."""
        dataset = self._datasets.get(dataset_id)
        parts = dataset.readers.get(identity) if dataset is not None else None
        return dict(parts) if parts else {dataset_id: identity}

    def source_for(self, dataset_id: str, identity: str) -> ColdSource | None:
        """The cold source of ``identity`` for a registered dataset, or None if it never registered it."""
        dataset = self._datasets.get(dataset_id)
        return dataset.sources.get(identity) if dataset is not None else None

    def first_source_url(self, dataset_id: str) -> str:
        """The prefix URL a registered dataset was first registered with (named in errors)."""
        return self._datasets[dataset_id].source.url

    def first_block(self, dataset_id: str) -> Block | None:
        """A registered dataset's first block (what a job's access check reads), or None when it has none."""
        blocks = self._datasets[dataset_id].blocks
        return blocks[0] if blocks else None

    def keep_sample_blocks(self, dataset_id: str, digest: str, sample_block: np.ndarray) -> None:
        """Keep a registered dataset's ``sample_block`` (int (num_samples,), a mapped manifest's
        column) under its ``digest`` (:attr:`~tierload.data.manifest.Manifest.samples_digest`), so
        that streams over it may be opened from seeds (:class:`~tierload.wire.messages.SeededStreamPlan`)."""
        self._datasets[dataset_id].sample_blocks.setdefault(digest, sample_block)

    def sample_blocks(self, dataset_id: str, digest: str) -> np.ndarray | None:
        """A registered dataset's kept ``sample_block`` with ``digest``, or None (no manifest file
        with it was mapped here: the blocks were sent, or another job cut other samples)."""
        return self._datasets[dataset_id].sample_blocks.get(digest)

    def num_blocks(self, dataset_id: str) -> int:
        """Blocks of a registered dataset."""
        return len(self._datasets[dataset_id].blocks)

    def block_sizes(self, dataset_id: str) -> np.ndarray:
        """int64 bytes of each block of a registered dataset, by block index."""
        return self._datasets[dataset_id].sizes

    def block_at(self, dataset_id: str, index: int) -> Block:
        """The block at ``index`` in a registered dataset's block list."""
        return self._datasets[dataset_id].blocks[index]

    def block(self, key: str) -> Block | None:
        """The block with this key, or None if no registered dataset has it."""
        for dataset in self._datasets.values():
            index = dataset.keys.find(key)
            if index is not None:
                return dataset.blocks[index]
        return None

    def owners(self, key: str) -> list[tuple[str, int]]:
        """``[(dataset_id, block index), ...]``: every registered block with this key, datasets in
        registration order (two datasets over the same objects share keys)."""
        return [(dataset_id, index) for dataset_id, dataset in self._datasets.items()
                for index in dataset.keys.indexes(key)]

    def locate(self, keys: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{dataset_id: (rows, block indexes)}``: which of ``keys`` (by row) each registered
        dataset holds, as int64 arrays, matched by 64-bit hash alone (see
        :meth:`KeyIndex.positions`): for the clairvoyant policy's distances over a hot tier's
        residents, where a collision would change one eviction choice, never a block's bytes."""
        hashes = np.fromiter((key_hash(key) for key in keys), np.uint64, len(keys))
        found = {}
        for dataset_id, dataset in self._datasets.items():
            indexes = dataset.keys.positions(hashes)
            rows = np.flatnonzero(indexes >= 0)
            if len(rows):
                found[dataset_id] = (rows, indexes[rows])
        return found

    def source_of(self, key: str, readers: Mapping[str, str] | None = None) -> ColdSource:
        """The cold source ``key`` is read with: for a stream's ``readers`` (:meth:`readers_of`),
        the source its identity registered for the first dataset holding ``key`` that it names,
        else the first registered dataset's.

        Raises:
            KeyError: No registered dataset has ``key``.
        """
        return self._source_among(self.owners(key), key, readers)

    def _source_among(self, owners: list[tuple[str, int]], key: str, readers: Mapping[str, str] | None) -> ColdSource:
        if not owners:
            raise KeyError(key)
        if readers:
            for dataset_id, _ in owners:
                identity = readers.get(dataset_id)
                own = self._datasets[dataset_id].sources.get(identity) if identity is not None else None
                if own is not None:
                    return own
        return self._datasets[owners[0][0]].source

    def read_cold(self, key: str, tally: dict | None = None) -> bytes:
        """The raw bytes of block ``key`` from its cold source (a pack's members concurrently).

        Raises:
            KeyError: No registered dataset has ``key``.
            SourceChangedError: The object, or a pack member, changed since the manifest was built.
            BackendError: The cold tier failed.
        """
        source, block = self._cold_of(key, None)
        return read_cold(source, block, tally)

    async def read_cold_async(self, key: str, tally: dict | None = None,
                              readers: Mapping[str, str] | None = None) -> bytes:
        """:meth:`read_cold`, awaitable on the node cache's fetch loop, with the credentials of
        ``readers`` where they registered the block's dataset (:meth:`source_of`)."""
        source, block = self._cold_of(key, readers)
        return await read_cold_async(source, block, tally)

    def _cold_of(self, key: str, readers: Mapping[str, str] | None) -> tuple[ColdSource, Block]:
        """``(source, block)`` of a cold read of ``key``, from one lookup of its owners.

        Raises:
            KeyError: No registered dataset has ``key``.
        """
        owners = self.owners(key)
        source = self._source_among(owners, key, readers)
        dataset_id, index = owners[0]  # every owner's block has these bytes: the key names them
        return source, self._datasets[dataset_id].blocks[index]
