"""One sample per object: image folders (``<prefix>/<label>/<name>.png``) and raw files, planned
from a listing (their samples are decoded by :mod:`tierload.data.layouts.object_decoders`).

The class of an object is its first folder below the dataset prefix (the torchvision
ImageFolder convention); class indices follow the sorted class names. Zero-byte objects are
never images: the image-folder layout skips and counts them; the raw-files layout yields
them as empty samples.
"""

from __future__ import annotations

import itertools
import logging
from typing import Sequence

import numpy as np
import pyarrow as pa

from tierload.arrow_values import from_numpy, int64_array, large_strings, to_numpy
from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan
from tierload.data.packs import ListedMembers, PackMembers, cut_runs, mixing_order, pack_digests
from tierload.errors import ManifestError
from tierload.process_memory import release_freed_memory
from tierload.stores.cold.listing import ObjectListing
from tierload.stores.cold.object_info import ObjectInfo

log = logging.getLogger(__name__)


def _skip(skipped: dict[str, str], urls: pa.Array, mask: np.ndarray, reason: str) -> None:
    if mask.any():
        skipped.update(dict.fromkeys(urls.filter(from_numpy(mask)).to_pylist(), reason))


def _kept(prefix_url: str, objects: ObjectListing, extensions: tuple[str, ...] | None,
          skip_empty: bool) -> tuple[ObjectListing, dict[str, str]]:
    """The objects that are samples, and the skipped ones' URLs with the reason."""
    import pyarrow.compute as pc  # here: a process that only decodes never loads it (~9 MB)

    keep = np.ones(len(objects), bool)
    skipped: dict[str, str] = {}
    if extensions is not None:
        lower = pc.utf8_lower(objects.urls)
        matches = np.zeros(len(objects), bool)
        for extension in extensions:
            matches |= to_numpy(pc.ends_with(lower, extension))
        _skip(skipped, objects.urls, ~matches, "extension not in manifest.extensions")
        keep &= matches
    if skip_empty:
        empty = keep & (objects.sizes == 0)
        _skip(skipped, objects.urls, empty, "zero-byte object is not an image")
        keep &= ~empty
    if not keep.any():
        raise ManifestError(f"no samples under the prefix ({len(objects)} objects listed, "
                            f"{len(skipped)} skipped; extensions={extensions})", tier="cold", url=prefix_url)
    if skipped:
        log.warning("%d objects under %s are not samples and were skipped (see manifest.skipped)",
                    len(skipped), prefix_url)
    return (objects if keep.all() else objects.take(np.flatnonzero(keep))), skipped


# URLs whose class names are computed at once by _labels (bounds Arrow's string temporaries).
_LABEL_WINDOW = 65536
# The first element of a list, as an Arrow scalar: a Python 0 would go through pa.scalar, which
# imports pandas (see tierload.arrow_values).
_FIRST = int64_array([0])[0]


def _labels(prefix_url: str, urls: pa.Array) -> tuple[np.ndarray, list[str]]:
    """int64 (objects,) class index of each URL, and the sorted class names.

    The class is the first folder below the prefix ("" for an object directly under it).
    The URLs are worked a window at a time: each step of the string work copies its input, and
    on the whole listing that is several hundred MB at a million keys.
    """
    import pyarrow.compute as pc  # here: a process that only decodes never loads it (~9 MB)

    codes: list[np.ndarray] = []
    dictionaries: list[list[str]] = []
    for lo in range(0, len(urls), _LABEL_WINDOW):
        window = urls.slice(lo, _LABEL_WINDOW)
        relative = pc.utf8_ltrim(pc.utf8_slice_codeunits(window, len(prefix_url)), characters="/")
        first = pc.list_element(pc.split_pattern(relative, "/", max_splits=1), _FIRST)
        classes = pc.if_else(pc.match_substring(relative, "/"), first, large_strings([""]).cast(first.type)[0])
        encoded = pc.dictionary_encode(classes)
        codes.append(to_numpy(encoded.indices))
        dictionaries.append(encoded.dictionary.to_pylist())
    names = sorted(set().union(*dictionaries))
    index = {name: position for position, name in enumerate(names)}
    labels = np.empty(len(urls), np.int64)
    at = 0
    for window_codes, dictionary in zip(codes, dictionaries, strict=True):
        lookup = np.array([index[name] for name in dictionary], np.int64)
        labels[at:at + len(window_codes)] = lookup[window_codes]
        at += len(window_codes)
    return labels, names


def plan_objects(prefix_url: str, objects: ObjectListing | Sequence[ObjectInfo], *, extensions: tuple[str, ...] | None,
                 skip_empty: bool, pack_threshold_bytes: int = 0, pack_target_bytes: int = 0,
                 pack_order: str = "listing") -> LayoutPlan:
    """One sample per object, labelled by class folder; one block per object or per pack of small ones.

    Works on the listing's columns: no Python object per sample (only per block).

    Args:
        prefix_url: The dataset prefix (no trailing slash).
        objects: The listing (a sequence of objects is turned into one).
        extensions: Lower-case suffixes to keep (None keeps every object).
        skip_empty: Skip zero-byte objects (recorded in ``skipped``) instead of yielding them.
        pack_threshold_bytes: Objects smaller than this are packed (see :mod:`tierload.data.packs`).
        pack_target_bytes: About how large a pack grows; 0 disables packing.
        pack_order: ``"mixed"`` packs small objects in :func:`tierload.data.packs.mixing_order` (the
            manifest's samples then follow that order), ``"listing"`` packs neighbours.

    Raises:
        ManifestError: No object qualifies.
    """
    if not isinstance(objects, ObjectListing):
        objects = ObjectListing.of(objects)
    kept, skipped = _kept(prefix_url, objects, extensions, skip_empty)
    labels, class_names = _labels(prefix_url, kept.urls)
    release_freed_memory()  # the label windows' string temporaries
    order = None
    sizes = kept.sizes
    if pack_target_bytes > 0 and pack_order == "mixed":
        # Samples follow the mixing order, the listing stays as it is: packs refer to its rows
        # (int32 ids), so the URLs and versions are never copied into a second, reordered listing.
        order = mixing_order(kept.sizes, pack_threshold_bytes)
        labels, sizes = labels[order], kept.sizes[order]
    bounds = cut_runs(sizes, pack_threshold_bytes, pack_target_bytes)
    del sizes
    lengths = np.diff(bounds)
    sample_block = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
    sample_index = _positions_in_runs(bounds, lengths)
    # Before the pack digests read every URL and version: the heap's freed pages of the
    # mixing and cutting temporaries would otherwise add to the build's peak.
    release_freed_memory()
    return LayoutPlan(
        blocks=_blocks(kept, bounds, order),
        sample_block=sample_block,
        sample_index=sample_index,
        labels=labels,
        classes=class_names,
        skipped=skipped,
    )


def _positions_in_runs(bounds: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int32 (bounds[-1],): each object's position inside its run (0 at every ``bounds`` entry),
    computed in int32 so that a million samples cost no int64 temporaries."""
    count = int(bounds[-1])
    dtype = np.int32 if count < 2**31 else np.int64
    positions = np.arange(count, dtype=dtype)
    np.subtract(positions, np.repeat(bounds[:-1].astype(dtype), lengths), out=positions)
    return positions.astype(np.int32, copy=False)


def _blocks(kept: ObjectListing, bounds: np.ndarray, order: np.ndarray | None = None) -> list[Block]:
    """A block per run: plain for one object, a pack for several.

    Runs are ranges of ``order`` (rows of ``kept``) when given, else of ``kept`` itself. A pack's
    members are then its rows of the listing (:class:`~tierload.data.packs.ListedMembers`), else a
    slice of it: either way no string is copied.
    """
    starts, stops = bounds[:-1], bounds[1:]
    single = (stops - starts) == 1
    rows = starts[single] if order is None else order[starts[single]]
    at = from_numpy(rows)
    plain = map(Block.of, kept.urls.take(at).to_pylist(), kept.versions.take(at).to_pylist(),
                itertools.repeat(0), kept.sizes[rows].tolist())
    digests = iter(pack_digests(kept.urls, kept.versions, kept.sizes, starts[~single], stops[~single], order))
    listing = PackMembers(kept.urls, kept.versions, kept.sizes)
    ids = None if order is None else order.astype(np.int32 if len(order) < 2**31 else np.int64)
    blocks = []
    for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
        if hi - lo == 1:
            blocks.append(next(plain))
        elif ids is None:
            members = PackMembers(kept.urls.slice(lo, hi - lo), kept.versions.slice(lo, hi - lo), kept.sizes[lo:hi])
            blocks.append(Block.pack(members, next(digests)))
        else:
            blocks.append(Block.pack(ListedMembers(listing, ids[lo:hi]), next(digests)))
    return blocks
