"""Getting samples onto the accelerator: GPUDirect Storage through kvikio, else pinned memory.

``TieredDataset(..., device="cuda")`` picks one path per process, logs it once and reports it
as ``device_path`` in :meth:`~tierload.loader.dataset.TieredDataset.cache_stats`:

* ``"kvikio-gds"``: kvikio reads a hot block's payload from its file straight into GPU memory
  through cuFile (GPUDirect Storage: NVMe -> GPU, no bounce through host memory).
* ``"kvikio-compat"``: kvikio is installed but GDS is not usable here (no ``libcufile``, no
  ``/run/udev`` in a container ...): kvikio's compatibility mode reads with POSIX into a
  bounce buffer and copies to the GPU, still without a Python ``bytes`` copy.
* ``"pinned-copy"``: no kvikio: the block is read and checked on the host. For the ``npy``
  and ``files`` layouts the whole block is copied into pinned (page-locked) memory and sent
  with one asynchronous ``non_blocking`` copy, then decoded on the device
  (:func:`block_to_device`); other layouts are decoded on the host and each tensor is sent
  through pinned memory.
* ``"cpu"``: no device was asked for (or CUDA is not available: a warning says so).

Only blocks whose samples are plain arrays go the kvikio way (the ``npy`` layout's rows and
the ``files`` layout's raw bytes); images, Parquet rows and tar samples are decoded on the
host and take the pinned path. With a device, a ``files`` sample is a 1-D uint8 tensor on
that device whichever path served it (:func:`sample_to_device`): a hit read by kvikio and a
miss read on the host give the same type. The kvikio path checks the block file's header (key, sizes),
then the payload against its keyed checksum like every other path: the bytes that landed in
GPU memory are copied back once into a pinned host buffer and hashed there (:class:`HostCheck`),
so a forged or corrupt hot file never reaches the model. Hashing the bytes on the GPU itself is
not an option (no BLAKE3 kernel in torch or kvikio), and hashing the file again on the host
would check other bytes than the ones read (the file may change in between) and read the disk
twice under GDS; the copy back costs one device-to-host DMA of the block.

kvikio is optional: ``pip install 'tierload[gds]'`` (CUDA 12 wheels, ``kvikio-cu12``) or
``'tierload[gds-cu13]'`` (``kvikio-cu13``). It is imported only here, and only when a device
is asked for. DataLoader workers never touch CUDA: under ``num_workers > 0`` samples stay on
the host; use ``DataLoader(pin_memory=True)`` and :func:`to_device` on each batch.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch

from tierload.errors import IntegrityError
from tierload.frames.blockfile import HEADER_SIZE, PAYLOAD_OFFSET, FrameHeader, check_payload, parse_header

log = logging.getLogger(__name__)

PATHS = ("kvikio-gds", "kvikio-compat", "pinned-copy", "cpu")


def kvikio_status() -> tuple[bool, bool, str]:
    """Whether kvikio can be used here, whether GDS proper is active, and why.

    Returns:
        ``(usable, gds, reason)``. ``usable`` needs kvikio importable and a CUDA device;
        ``gds`` is False when kvikio would run in its compatibility mode.
    """
    try:
        import kvikio
        import kvikio.defaults
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken CUDA runtime inside kvikio
        return False, False, f"kvikio is not importable ({type(exc).__name__}: {exc}); pip install 'tierload[gds]'"
    if not torch.cuda.is_available():
        return False, False, "no CUDA device is visible to torch"
    defaults = kvikio.defaults
    try:
        if hasattr(defaults, "is_compat_mode_preferred"):
            compat = bool(defaults.is_compat_mode_preferred())
        else:  # kvikio < 24.12 returned a bool here
            compat = bool(defaults.compat_mode())
    except Exception as exc:  # noqa: BLE001
        return True, False, f"kvikio cannot tell its mode ({exc}); assuming compatibility mode"
    if compat:
        return True, False, "kvikio runs in compatibility mode (no usable libcufile/GDS here): POSIX + copy"
    return True, True, "kvikio with cuFile (GPUDirect Storage)"


def choose_path(device: str | torch.device | None) -> tuple[str, str]:
    """Pick the output path for ``device``: ``(path, reason)``, ``path`` one of :data:`PATHS`."""
    if device is None:
        return "cpu", "no device requested"
    device = torch.device(device)
    if device.type != "cuda":
        return "cpu", f"device {device} is not CUDA: tensors are created there by .to()"
    if not torch.cuda.is_available():
        return "cpu", "CUDA is not available: samples stay on the host"
    if os.environ.get("TIERLOAD_GDS", "").lower() in ("0", "off", "false", "no"):
        return "pinned-copy", "TIERLOAD_GDS=off"
    usable, gds, reason = kvikio_status()
    if not usable:
        return "pinned-copy", reason
    return ("kvikio-gds" if gds else "kvikio-compat"), reason


def to_device(obj: Any, device: str | torch.device, *, pin: bool = True) -> Any:
    """Move every tensor in ``obj`` (nested dicts, lists, tuples) to ``device`` asynchronously.

    CPU tensors go through pinned memory (unless already pinned or ``pin=False``) so the copy
    is a ``non_blocking`` DMA. Other values are returned unchanged.
    """
    if isinstance(obj, torch.Tensor):
        if obj.device == torch.device(device):
            return obj
        if pin and obj.device.type == "cpu" and torch.device(device).type == "cuda" and not obj.is_pinned():
            obj = obj.pin_memory()
        return obj.to(device, non_blocking=True)
    if isinstance(obj, dict):
        return {key: to_device(value, device, pin=pin) for key, value in obj.items()}
    if isinstance(obj, list):
        return [to_device(value, device, pin=pin) for value in obj]
    if isinstance(obj, tuple):
        items = [to_device(value, device, pin=pin) for value in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


def block_to_device(raw: Any, device: str | torch.device) -> torch.Tensor:
    """A block's raw bytes, read and checked on the host, as a uint8 tensor on ``device``.

    One copy into pinned memory and one asynchronous DMA per block, so the samples decoded from
    it are views already on the device: a per-sample pin and copy costs more than the sample
    for rows or files of a few KiB (measured in ``benchmarks/gpu_e2e.py``). Used on the
    ``pinned-copy`` path for layouts whose blocks decode from a device buffer.

    Args:
        raw: The block's payload (bytes-like), shape ``(n,)`` bytes.
        device: The CUDA device.

    Returns:
        ``torch.uint8`` tensor of shape ``(n,)`` on ``device``.
    """
    source = np.frombuffer(raw, dtype=np.uint8)
    staging = torch.empty(source.size, dtype=torch.uint8, pin_memory=True)
    staging.numpy()[:] = source
    return staging.to(device, non_blocking=True)


def sample_to_device(sample: Any, device: str | torch.device) -> Any:
    """One decoded sample on ``device``: raw bytes (the ``files`` layout) become a 1-D uint8
    tensor first, so a sample's type does not depend on whether kvikio or the host read it;
    everything else goes through :func:`to_device`.

    Args:
        sample: A decoded sample: a tensor, nested containers of tensors, or bytes-like.
        device: The output device.

    Returns:
        The sample with every tensor on ``device`` (bytes-like: ``torch.uint8`` of shape ``(len,)``).
    """
    if isinstance(sample, (bytes, bytearray, memoryview)):
        # a copy: the slice points into a block buffer that is dropped after its samples are used
        sample = torch.from_numpy(np.frombuffer(sample, dtype=np.uint8).copy())
    return to_device(sample, device)


class HostCheck:
    """Checks a block's bytes held in a tensor against its frame's checksum, on the host.

    A CUDA tensor is copied (synchronously) into a pinned host buffer kept for the next block
    (grown to the largest block seen); a CPU tensor is hashed in place.
    """

    def __init__(self) -> None:
        self._staging: torch.Tensor | None = None

    def check(self, key: str, header: FrameHeader, data: torch.Tensor, secret: bytes | None) -> None:
        """Check ``data`` (uint8, 1-D, ``header.raw_size`` bytes, any device) against ``header``.

        Args:
            key: The block key.
            header: The frame's header (its checksum was taken when the block left the cold tier).
            data: The block's raw bytes.
            secret: The deployment's checksum key (None: unkeyed xxh3-64).

        Raises:
            IntegrityError: The bytes do not match the checksum (``tier="hot"``).
        """
        host = data
        if data.device.type != "cpu":
            size = data.numel()
            if self._staging is None or self._staging.numel() < size:
                self._staging = torch.empty(size, dtype=torch.uint8, pin_memory=True)
            host = self._staging[:size]
            host.copy_(data)
        try:
            check_payload(key, header, host.numpy().data, secret)
        except IntegrityError as exc:
            raise IntegrityError(f"hot block file: {exc.message}", tier="hot", key=key) from exc


class KvikioBlockReader:
    """Reads hot blocks' payloads into GPU memory with kvikio (main process only).

    Args:
        device: The CUDA device.
    """

    def __init__(self, device: str | torch.device) -> None:
        import kvikio

        self._kvikio = kvikio
        self.device = torch.device(device)
        self._host_check = HostCheck()

    def read(self, path: str, key: str, secret: bytes | None = None) -> torch.Tensor | None:
        """The block's raw bytes as a uint8 CUDA tensor, checked against the frame's checksum,
        or None if the file is absent or compressed.

        Args:
            path: The hot block file.
            key: The block key.
            secret: The deployment's checksum key (None: the frame's checksum is unkeyed xxh3-64).

        Raises:
            IntegrityError: The file's header does not belong to ``key``, its size is wrong, or
                the bytes read do not match the checksum.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            head = os.pread(fd, HEADER_SIZE, 0)
            file_size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        try:
            header = parse_header(key, head, frame_size=file_size)
        except IntegrityError as exc:
            raise IntegrityError(f"hot block file: {exc.message}", tier="hot", key=key) from exc
        if header.codec != "raw":
            return None  # stored compressed: decompress on the host
        raw_size = header.raw_size
        out = torch.empty(raw_size, dtype=torch.uint8, device=self.device)
        if raw_size:
            with self._kvikio.CuFile(path, "r") as handle:
                got = handle.pread(out, raw_size, PAYLOAD_OFFSET).get()
            if got != raw_size:
                raise IntegrityError(f"kvikio read {got} of {raw_size} bytes", tier="hot", key=key)
        self._host_check.check(key, header, out, secret)
        return out


class DeviceOutput:
    """How one dataset's samples reach its output device: the path is chosen once per process.

    Args:
        device: The requested device, or None (samples stay where they are decoded).
    """

    def __init__(self, device: torch.device | None) -> None:
        self.device = device
        self._chosen: tuple[str, str] | None = None
        self._kvikio: KvikioBlockReader | None = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_kvikio"] = None  # CUDA state never crosses a process boundary
        return state

    @property
    def path(self) -> str:
        """``kvikio-gds``, ``kvikio-compat``, ``pinned-copy`` or ``cpu`` (before the first
        iteration: the path that iteration will take)."""
        return self._chosen[0] if self._chosen is not None else choose_path(self.device)[0]

    def prepare(self, in_worker: bool, direct_layout: bool) -> tuple[torch.device | None, "KvikioBlockReader | None"]:
        """``(device or None, kvikio reader or None)`` for an iteration; logs the path once per process.

        Args:
            in_worker: The iteration runs in a DataLoader worker (which never touches CUDA).
            direct_layout: The layout's blocks decode from a device buffer (kvikio can serve them).
        """
        if self.device is None:
            return None, None
        if in_worker:
            if self._chosen is None:
                self._chosen = ("cpu", "DataLoader workers return host tensors")
                log.warning("TieredDataset(device=%s) under DataLoader workers: samples stay on the host; use "
                            "DataLoader(pin_memory=True) and tierload.loader.gpu.to_device(batch, %r)", self.device,
                            str(self.device))
            return None, None
        if self._chosen is None:
            path, reason = choose_path(self.device)
            if path.startswith("kvikio"):
                try:
                    self._kvikio = KvikioBlockReader(self.device)
                except Exception as exc:  # noqa: BLE001 - any kvikio/CUDA start-up failure: fall back
                    path, reason = "pinned-copy", f"kvikio failed to start ({type(exc).__name__}: {exc})"
            self._chosen = (path, reason)
            log.info("tierload output path: %s to %s (%s)", path, self.device, reason)
        if self._chosen[0] == "cpu":
            return None, None
        return self.device, (self._kvikio if direct_layout else None)

    def read_direct(self, hot_path: str | None, key: str, secret: bytes | None = None) -> torch.Tensor | None:
        """A hot block read by kvikio into device memory and checked against its checksum (keyed
        with ``secret``, the deployment's key), or None (not hot, compressed, corrupt or forged,
        or kvikio failed)."""
        if hot_path is None or self._kvikio is None:
            return None
        try:
            return self._kvikio.read(hot_path, key, secret)
        except IntegrityError:
            return None  # the host path re-verifies and has the node cache refetch it
        except Exception as exc:  # noqa: BLE001 - a kvikio/cuFile failure: fall back for good
            log.warning("kvikio read failed (%s: %s); falling back to pinned host memory", type(exc).__name__, exc)
            self._kvikio = None
            self._chosen = ("pinned-copy", f"kvikio read failed: {exc}")
            return None
