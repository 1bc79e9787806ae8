"""The user's order: a ``sampler=``'s index sequence as a rank's epoch order.

``TieredDataset(url, sampler=...)`` takes any iterable of sample indices (a
``WeightedRandomSampler``, a ``DistributedSampler``, a curriculum list, a NumPy array). Its
sequence for an epoch is this rank's order for that epoch, and so the known future the node
cache plans from: the stream's block sequence (prefetch, and the clairvoyant policy's
next-use distances) is built from it exactly as from a built-in shuffle.

The sampler is iterated once per epoch, in the process that holds it (the training process):
on :meth:`SamplerOrders.refresh` (``set_epoch``, after the sampler's own ``set_epoch`` where it
has one) and, for an epoch never refreshed, at its first use there. The sequence is kept as one
int64 array and written to a private file, which DataLoader workers map (read-only, shared
pages, nothing per sample and no copy per worker); a worker never iterates the sampler (a
random sampler would give each worker another sequence). A refreshed epoch's file is replaced
atomically, so persistent workers see the new order at their next epoch.

Semantics (as a DataLoader's ``sampler=``): the sequence is this rank's whole order; ranks are
not sliced further (give each rank its part, e.g. with ``DistributedSampler``) and
``drop_last`` is not applied to it. The next epoch's order is not known before its
``set_epoch`` (iterating a random sampler ahead would change what it yields), so the plan of a
sampler-driven epoch carries no look-ahead into the next one.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from typing import Any, Iterable

import numpy as np
import torch

from tierload.errors import ConfigError, SampleIndexError, ServiceError

log = logging.getLogger(__name__)


def materialise(sampler: Iterable[Any], num_samples: int, epoch: int) -> np.ndarray:
    """One epoch's sequence of ``sampler`` as an int64 array, checked against the dataset.

    Calls ``sampler.set_epoch(epoch)`` first where the sampler has it (``DistributedSampler``).

    Args:
        sampler: Any iterable of sample indices (Python ints, NumPy or torch integers), or an
            integer NumPy array / torch tensor.
        num_samples: Samples in the dataset: valid indices are ``0 .. num_samples - 1``.
        epoch: The epoch the sequence is for (given to ``set_epoch``; named in errors).

    Returns:
        int64 (len of the sequence,): the indices in the sampler's order.

    Raises:
        SampleIndexError: An index outside ``0 .. num_samples - 1`` (the first one, its position
            and the valid range are named).
        ConfigError: The sampler yields something that is not an integer index.
    """
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)
    if isinstance(sampler, torch.Tensor):
        sampler = sampler.numpy()
    try:
        if isinstance(sampler, np.ndarray):
            if sampler.dtype.kind not in "iu":
                raise ConfigError(f"sampler is an array of {sampler.dtype}; it must hold integer sample indices")
            order = np.ascontiguousarray(sampler.reshape(-1), dtype=np.int64)
        else:
            order = np.fromiter((int(index) for index in sampler), dtype=np.int64)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"sampler={type(sampler).__name__} did not yield integer sample indices in epoch "
                          f"{epoch}: {exc}") from None
    bad = np.flatnonzero((order < 0) | (order >= num_samples))
    if len(bad):
        first = int(bad[0])
        raise SampleIndexError(f"sampler yielded index {int(order[first])} at position {first} of epoch {epoch} "
                               f"({len(bad)} bad in all); valid sample indices are 0 .. {num_samples - 1} "
                               f"(the dataset has {num_samples} samples)")
    return order


class SamplerOrders:
    """A sampler's sequence per epoch: iterated in the training process, mapped in workers.

    Pickles without the sampler (workers read the files); the directory is removed when the
    object that made it is collected.

    Args:
        sampler: Any iterable of sample indices (see :func:`materialise`).
    """

    def __init__(self, sampler: Iterable[Any]) -> None:
        if isinstance(sampler, (str, bytes)) or not isinstance(sampler, Iterable):
            raise ConfigError(f"sampler={sampler!r} is not an iterable of sample indices (e.g. a "
                              "WeightedRandomSampler, a DistributedSampler or a list)")
        self.sampler: Iterable[Any] | None = sampler
        self.directory = tempfile.mkdtemp(prefix="tierload-sampler-")  # 0700: this user's only
        # Only this process removes it: a forked DataLoader worker holds a copy of this object too.
        self._cleanup = weakref.finalize(self, _remove_if_owner, self.directory, os.getpid())
        self._orders: dict[int, np.ndarray] = {}  # in this process, by epoch

    def __getstate__(self) -> dict[str, Any]:
        return {"sampler": None, "directory": self.directory, "_orders": {}, "_cleanup": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _path(self, epoch: int) -> str:
        return os.path.join(self.directory, f"epoch-{epoch}.npy")

    def refresh(self, epoch: int, num_samples: int) -> np.ndarray:
        """Iterate the sampler for ``epoch`` (again) and publish its sequence to the workers.

        Raises:
            SampleIndexError, ConfigError: As :func:`materialise`.
            ServiceError: Called in a process that does not hold the sampler (a DataLoader worker).
        """
        if self.sampler is None:
            raise ServiceError("a DataLoader worker cannot iterate the dataset's sampler; call set_epoch in the "
                               "training process")
        order = materialise(self.sampler, num_samples, epoch)
        temp = self._path(epoch) + f".{os.getpid()}.tmp"
        with open(temp, "wb") as file:
            np.save(file, order)
        os.replace(temp, self._path(epoch))  # workers map the old file or the new one, never half of one
        self._orders = {epoch: order}  # the epochs before are done with
        log.debug("sampler order of epoch %d: %d indices", epoch, len(order))
        return order

    def order(self, epoch: int, num_samples: int) -> np.ndarray:
        """int64 (samples of the epoch,): the sampler's sequence for ``epoch``.

        The sequence refreshed last for ``epoch`` (mapped read-only from its file outside the
        process that refreshed it); an epoch never materialised is iterated now, in the process
        that holds the sampler.

        Raises:
            ServiceError: In a worker, for an epoch the training process never materialised.
            SampleIndexError, ConfigError: As :func:`materialise`.
        """
        order = self._orders.get(epoch)
        if order is not None:
            return order
        try:  # materialised before (this process or the one that made it): never iterated twice unasked
            return np.load(self._path(epoch), mmap_mode="r")
        except FileNotFoundError:
            if self.sampler is not None:
                return self.refresh(epoch, num_samples)
            raise ServiceError(f"the sampler's order of epoch {epoch} was never materialised in the training "
                               f"process; call dataset.set_epoch({epoch}) before the DataLoader starts its "
                               "workers") from None


def _remove_if_owner(directory: str, owner_pid: int) -> None:
    """Remove the orders' directory, in the process that made it only."""
    if os.getpid() == owner_pid:
        shutil.rmtree(directory, ignore_errors=True)
