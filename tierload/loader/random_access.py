"""Random access: ``ds[i]``, a batched ``ds.__getitems__(indices)``, and a map-style view.

A sample is read through the tiers like a planned block, with no stream: its block's file in
the hot tier is read here directly (no call); otherwise one call of the node cache's typed
:meth:`~tierload.wire.api.NodeCacheAPI.read_sample` finds it in a fetch already on its way, a
peer's hot tier, the warm tier or cold (:mod:`tierload.node.sample_reads`). A member of a pack
of small objects that no tier holds is read alone by one ranged request of its bytes, never
the whole pack. What comes back is decoded exactly as iteration decodes it, and the dataset's
``transform`` is applied, so ``ds[i]`` equals the ``(sample, label)`` iteration yields for
sample ``i`` (on the host: ``device=`` applies to iteration only).

``TieredDataset`` is an ``IterableDataset``, which ``DataLoader(shuffle=True)`` and samplers
refuse; :meth:`TieredDataset.map_style` returns :class:`MapStyleView`, a map-style ``Dataset``
over the same started dataset::

    view = ds.map_style()
    loader = DataLoader(view, batch_size=64, shuffle=True, num_workers=4, collate_fn=tierload.collate)

A map-style loader's order is the sampler's, which the node cache does not know ahead: nothing
is prefetched for it (use ``TieredDataset(sampler=...)`` for a planned order). Each process
(the training process, each DataLoader worker) talks to the node cache over its own connection.
"""

from __future__ import annotations

import logging
import operator
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, Callable, Sequence

from torch.utils.data import Dataset

from tierload.errors import ChannelLostError, IntegrityError, SampleIndexError
from tierload.frames.blockfile import decode_frame, decode_frame_file
from tierload.loader.consumer import BlockReader
from tierload.wire.messages import HotBlock, MemberFrame, SampleRead, WireBlock, member_key

if TYPE_CHECKING:
    from tierload.data.layouts.base import BlockDecoder
    from tierload.data.manifest import Manifest
    from tierload.loader.consumer import DirectSource, NodeLink
    from tierload.loader.dataset import TieredDataset

log = logging.getLogger(__name__)


def sample_index(index: Any, num_samples: int) -> int:
    """``index`` (an int, a NumPy or 0-d torch integer; negative counts from the end) as a sample id.

    Raises:
        SampleIndexError: Not an integer, or outside ``-num_samples .. num_samples - 1``.
    """
    try:
        value = operator.index(index)
    except TypeError:
        raise SampleIndexError(f"sample index {index!r} is not an integer") from None
    if not -num_samples <= value < num_samples:
        raise SampleIndexError(f"sample index {value} is outside the dataset: valid indices are 0 .. "
                               f"{num_samples - 1} (or -{num_samples} .. -1)")
    return value % num_samples


class SampleReader:
    """Reads samples by id through the tiers, in one process.

    Args:
        manifest: The dataset's manifest.
        link: The node cache.
        decoder: Cuts samples out of a block's bytes; with ``decode_member(sample_id, data)``
            (the objects layouts) a pack member is read and decoded alone.
        transform: The dataset's transform, or None.
        direct: Builds the reader used while the node cache is unreachable.
        stats: This process's consumer counters (the dataset's ``consumer_stats``): blocks read
            from a hot file here (``random_hot_reads``, no call), answers of the node cache
            (``random_cache_reads``; it counts their source), blocks read without it
            (``fallback_reads``).
    """

    def __init__(self, manifest: Manifest, link: NodeLink, decoder: BlockDecoder,
                 transform: Callable[[Any], Any] | None, direct: Callable[[], DirectSource],
                 stats: Counter) -> None:
        self.manifest = manifest
        self.link = link
        self.decoder = decoder
        self.transform = transform
        self.blocks = BlockReader(link)  # the hot levels and the checksum key
        self.direct = direct
        self._direct_source: DirectSource | None = None
        self.stats = stats
        self._decode_member = getattr(decoder, "decode_member", None)

    def sample(self, index: Any) -> tuple[Any, int]:
        """``(sample, label)`` of sample ``index``, as iteration yields it.

        Raises:
            SampleIndexError: ``index`` is outside the dataset.
            TierloadError: No tier could serve its block (e.g. the cold read failed).
        """
        return self.samples([index])[0]

    def samples(self, indices: Sequence[Any]) -> list[tuple[Any, int]]:
        """``(sample, label)`` of each of ``indices``, in their order; each block is read and
        decoded once however many of its samples are asked for.

        Raises:
            SampleIndexError: An index is outside the dataset.
            TierloadError: No tier could serve a block.
        """
        manifest = self.manifest
        ids = [sample_index(index, manifest.num_samples) for index in indices]
        by_block: defaultdict[int, list[int]] = defaultdict(list)
        for at, sample_id in enumerate(ids):
            by_block[int(manifest.sample_block[sample_id])].append(at)
        result: list[Any] = [None] * len(ids)
        for block_id, positions in by_block.items():
            for at, item in zip(positions, self._read_block_samples(block_id, [ids[at] for at in positions]),
                                strict=True):
                result[at] = item if self.transform is None else (self.transform(item[0]), item[1])
        return result

    # ------------------------------------------------------------------ one block
    def _read_block_samples(self, block_id: int, sample_ids: list[int]) -> list[tuple[Any, int]]:
        block = self.manifest.blocks[block_id]
        sample_in_block = self.manifest.sample_index
        raw = self._hot_copy(block.key)
        if raw is not None:
            self.stats["random_hot_reads"] += 1
        elif block.members is not None and self._decode_member is not None:
            members = sorted({int(sample_in_block[sample_id]) for sample_id in sample_ids})
            # Members alone while they are fewer than half the pack: more, and one read of the whole
            # pack costs fewer requests for about the same bytes.
            if 2 * len(members) < len(block.members):
                found = {member: self._member_or_block(block_id, member) for member in members}
                return [self._from_member_answer(block_id, sample_id, found[int(sample_in_block[sample_id])])
                        for sample_id in sample_ids]
        if raw is None:
            raw = self._whole_block(block_id)
        samples = self.decoder.decode(block_id, raw)
        return [samples[int(sample_in_block[sample_id])] for sample_id in sample_ids]

    def _hot_copy(self, key: str) -> bytes | None:
        """The block's bytes from a hot level's file on this node, or None (no call)."""
        for level in self.blocks.levels:
            try:
                return decode_frame_file(key, level.path(key), secret=self.blocks.secret)
            except FileNotFoundError:
                continue
            except IntegrityError:
                log.warning("hot copy of block %s failed its checksum; reading it through the node cache", key)
                return None
        return None

    def _ask(self, request: SampleRead) -> HotBlock | WireBlock | MemberFrame | None:
        """The node cache's answer, or None when no cache answers (the caller reads directly)."""
        try:
            answer = self.link.call(lambda cache: cache.read_sample(request))
        except ChannelLostError as exc:
            log.warning("no node cache answers (%s); reading block %s directly", exc, request.key)
            return None
        self.stats["random_cache_reads"] += 1
        return answer

    def _whole_block(self, block_id: int) -> bytes:
        key = self.manifest.blocks[block_id].key
        answer = self._ask(SampleRead(self.manifest.dataset_id, key, identity=self.link.identity))
        raw = self._block_bytes(key, answer)
        if isinstance(raw, bytes):
            return raw
        return self._direct(key)

    def _member_or_block(self, block_id: int, member: int) -> HotBlock | WireBlock | MemberFrame | None:
        return self._ask(SampleRead(self.manifest.dataset_id, self.manifest.blocks[block_id].key, member,
                                    identity=self.link.identity))

    def _from_member_answer(self, block_id: int, sample_id: int,
                            answer: HotBlock | WireBlock | MemberFrame | None) -> tuple[Any, int]:
        key = self.manifest.blocks[block_id].key
        if isinstance(answer, MemberFrame):
            member = int(self.manifest.sample_index[sample_id])
            data = decode_frame(member_key(key, member), MemberFrame.received(answer).frame,
                                secret=self.blocks.secret)[0]
            assert self._decode_member is not None, "members are asked for only when the decoder takes one"
            return self._decode_member(sample_id, data)
        raw = self._block_bytes(key, answer)
        samples = self.decoder.decode(block_id, raw if isinstance(raw, bytes) else self._direct(key))
        return samples[int(self.manifest.sample_index[sample_id])]

    def _block_bytes(self, key: str, answer: HotBlock | WireBlock | MemberFrame | None) -> bytes | None:
        """The whole block's bytes from a node cache's answer (None: read it directly)."""
        if isinstance(answer, WireBlock):
            return decode_frame(key, WireBlock.received(answer).frame, secret=self.blocks.secret)[0]
        if isinstance(answer, HotBlock):
            level = HotBlock.received(answer).level
            try:
                return decode_frame_file(key, self.blocks.levels[level].path(key), secret=self.blocks.secret)
            except (FileNotFoundError, IntegrityError):
                log.warning("block %s left hot level %d (or is corrupt) before it was read; reading it directly",
                            key, level)
        return None

    def _direct(self, key: str) -> bytes:
        """The block from the warm tier or cold, without the node cache (it is gone, or its copy left)."""
        if self._direct_source is None:
            self._direct_source = self.direct()
        self.stats["fallback_reads"] += 1
        return self._direct_source.read(key)


class MapStyleView(Dataset):
    """A map-style ``Dataset`` over a started :class:`~tierload.loader.dataset.TieredDataset`:
    ``view[i]`` is ``dataset[i]``, ``len(view)`` the dataset's sample count, for a standard
    ``DataLoader(shuffle=True)`` or any sampler (see this module's docstring).

    Args:
        dataset: The dataset (started; it shares its config, manifest and node cache).
    """

    def __init__(self, dataset: TieredDataset) -> None:
        self.dataset = dataset.start()

    def __len__(self) -> int:
        """Samples in the dataset (all ranks' together: a sampler splits them)."""
        return self.dataset.manifest.num_samples

    def __getitem__(self, index: Any) -> tuple[Any, int]:
        """``(sample, label)`` of sample ``index`` (see :meth:`SampleReader.sample`)."""
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[Any]) -> list[tuple[Any, int]]:
        """The samples of a batch of indices, each block read once (the DataLoader calls this)."""
        return self.dataset.__getitems__(indices)

