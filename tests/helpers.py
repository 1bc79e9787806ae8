"""Helpers shared by test modules."""

from __future__ import annotations

import glob
import io
import os
import tarfile
from pathlib import Path

import numpy as np

from tierload.wire.endpoint import ENDPOINT_FILE


def put_indexed_objects(fs, prefix: str, count: int, *, size: int = 0, classes: int = 1) -> list[bytes]:
    """Write ``count`` objects whose payload starts with their index as 8 ASCII digits."""
    payloads = [f"{index:08d}".encode() + bytes(max(0, size - 8)) for index in range(count)]
    # One pipe of them all: s3fs sends the PUTs concurrently (500 objects: 1.6 -> 0.9 CPU-s of the client).
    fs.pipe({f"{prefix}/{index % classes}/obj-{index:06d}.bin": body for index, body in enumerate(payloads)})
    fs.invalidate_cache()
    return payloads


def put_objects(s3, bucket: str, objects: dict[str, bytes]) -> None:
    """PUT ``objects`` (key -> body) into ``bucket`` on moto's server over plain HTTP, four connections at once.

    The thousands of objects a listing needs to pass a 1,000-key page are set-up, not what is tested: moto's
    server takes unsigned PUTs, and botocore's signing and parsing cost 4x the client CPU per object
    (cpuacct, 1,000 PUTs: 1.8 CPU-s through s3fs, 0.4 through http.client; moto's own 2.4 either way).
    The objects, their ETags and their listing are the same.
    """
    import http.client
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import quote, urlsplit

    endpoint = urlsplit(s3.endpoint_url)
    items = sorted(objects.items())

    def put(share: list[tuple[str, bytes]]) -> None:
        connection = http.client.HTTPConnection(endpoint.hostname, endpoint.port, timeout=60)
        try:
            for key, body in share:
                connection.request("PUT", f"/{bucket}/{quote(key)}", body=body)
                response = connection.getresponse()
                response.read()
                assert response.status == 200, (key, response.status)
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, [items[i::4] for i in range(4)]))


def png_bytes(value: int, side: int = 8) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((side, side), value % 256, dtype=np.uint8), mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def index_of(sample) -> int:
    """Index encoded by :func:`put_indexed_objects` in a raw-file sample."""
    return int(bytes(sample[:8]).decode())


def _block_file_sizes(path: Path) -> dict[int, int]:
    """``{inode: size}`` of the block files (complete and temporary) under a tier directory.

    Keyed by inode, because a temporary file renamed into place during the walk would
    otherwise be counted twice; the node cache's published endpoint and owner lock are not blocks.
    """
    sizes = {}
    for root, _dirs, files in os.walk(path):
        for file in files:
            if file == ENDPOINT_FILE or file.startswith(".tierload"):  # tierload's own files, not blocks
                continue
            try:
                info = os.stat(os.path.join(root, file))
            except FileNotFoundError:
                continue
            sizes[info.st_ino] = info.st_size
    return sizes


def tier_bytes(path: Path) -> int:
    """Bytes of the block files (complete and temporary) under a tier directory."""
    return sum(_block_file_sizes(path).values())


def _files(path: Path) -> frozenset:
    return frozenset(_block_file_sizes(path).items())


class TierUsage:
    """Samples the bytes of block files in a tier directory, without ever over-counting.

    On a tmpfs mounted for the test (``mounted=True``) the file system's own counters are read:
    one atomic snapshot, counted in 4 KiB pages. Otherwise a directory walk is not atomic (a
    file deleted after it was counted and one created later are both seen), so a sample
    counts only when two walks in a row see exactly the same files.
    """

    PAGE = 4096

    def __init__(self, path: Path, mounted: bool) -> None:
        self.path = path
        self.mounted = mounted
        self.baseline = self._used() if mounted else 0

    def _used(self) -> int:
        stats = os.statvfs(self.path)
        return (stats.f_blocks - stats.f_bfree) * stats.f_frsize

    def _own_pages(self) -> int:
        """Pages of tierload's own files in the directory (the endpoint, the checksum key), not blocks."""
        pages = 0
        for path in (self.path / ENDPOINT_FILE, *self.path.glob(".tierload*")):
            try:
                pages += -(-path.stat().st_size // self.PAGE) if path.is_file() else 0
            except FileNotFoundError:
                continue
        return pages

    def blocks_now(self, block_bytes: int) -> int | None:
        """How many blocks of ``block_bytes`` the tier holds now (None: no consistent sample)."""
        if self.mounted:
            pages_per_block = -(-block_bytes // self.PAGE)
            return (self._used() - self.baseline) // self.PAGE // pages_per_block - self._own_pages()
        first = _files(self.path)
        if first != _files(self.path):
            return None
        return sum(size for _, size in first) // block_bytes


def land_warm_writes(dataset, timeout_s: float = 60.0) -> None:
    """Wait until the node cache has no fetch in flight, then have it sync with the coordinator
    now (``sync_now``): every warm write proposed so far is admitted and written, and every
    residency change reported, when this returns. Replaces sleeping "long enough"."""
    import time

    deadline = time.monotonic() + timeout_s
    while dataset.cache_stats()["inflight"]:
        assert time.monotonic() < deadline, "the node cache's fetches never finished"
        time.sleep(0.01)
    dataset._link.call(lambda cache: cache.sync_now(), wait_s=30.0)


def actor_log_lines(pid: int, needle: str) -> int:
    """Lines holding ``needle`` in the stderr log Ray keeps for the worker process ``pid``."""
    import ray

    logs = ray._private.worker._global_node.get_logs_dir_path()
    count = 0
    for path in glob.glob(os.path.join(logs, f"worker-*-{pid}.err")):
        with open(path, errors="replace") as handle:
            count += sum(needle in line for line in handle)
    return count


def named_call(name: str):
    """A call of a method no interface declares: how a client built for another server, or a
    hostile one, would name it."""
    def call(self):
        raise AssertionError("never run: only the name travels")
    call.__name__ = name
    return call


def tar_of(members: list[tuple[str, bytes]]) -> bytes:
    """A tar stream holding ``members`` in the given order (a name may repeat, as ``tar -r`` allows)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
