"""A tier backend on a local directory (NVMe, a tmpfs for RAM, or a shared-FS mount).

Layout: ``<root>/<2 hex>/<key>`` (fan-out keeps directories small at millions of blocks),
temporary files in ``<root>/.tmp/<key>.<pid>.<random>``. A temporary file is renamed into
place only once complete, so a crash leaves at most a temporary file, which :meth:`scan`
removes once its writer is dead.

A directory that exists but cannot be written (a read-only mount, no permission) still opens:
its blocks are served, and each write raises :class:`BackendError`, which the tier's owner
turns into "admit nothing for a while" (:mod:`tierload.stores.tier_writes`).
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import BinaryIO

from tierload.errors import BackendError
from tierload.stores.base import BlockStore
from tierload.stores.dir_trust import dir_mode, make_private_dirs, make_tier_dir, open_new_file
from tierload.stores.keys import check_key

log = logging.getLogger(__name__)

_TMP = ".tmp"
# Written in every tier directory, so that a listing of a local source skips the directory
# whole (its blocks, the endpoint file and the key are tierload's own files, never samples).
TIER_MARKER = ".tierload-tier"


def pid_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists on this machine (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mark(root: Path, shared: bool) -> None:
    """Leave :data:`TIER_MARKER` in ``root`` (a read-only directory keeps none: it still works as a tier)."""
    marker = root / TIER_MARKER
    if not marker.exists():
        try:
            open_new_file(marker, shared=shared).close()
        except OSError:
            pass



def _warn_not_writable(tier: str, url: str, reason: str) -> None:
    log.warning("the %s tier directory %s is not writable (%s); its blocks are served, none is added", tier, url,
                reason)

class LocalDirStore(BlockStore):
    """Blocks as files under a local directory.

    Args:
        root: Directory path (``~`` expanded; created owner-only if missing, see
            :mod:`tierload.stores.dir_trust`).
        tier: Tier name used in error messages.
        shared: The directory is shared on purpose (``hot.shared`` / ``warm.shared``): no
            ownership or mode check.
        check: False where the directory's owner already checked it (a consumer reading the
            node cache's hot tier).

    Raises:
        UntrustedDirError: Another user owns the directory, or group/others may write it.
        BackendError: The directory does not exist and cannot be created.
    """

    def __init__(self, root: str | os.PathLike, tier: str = "hot", *, shared: bool = False,
                 check: bool = True) -> None:
        self.root = Path(os.path.expanduser(str(root))).resolve()
        self.url = str(self.root)
        self.tier = tier
        self.shared = shared
        try:
            if check:
                make_tier_dir(self.root, tier=tier, shared=shared)
            make_private_dirs(self.root / _TMP, shared=shared)
        except OSError as exc:
            if not self.root.is_dir():
                raise BackendError(f"cannot create the {tier} tier directory: {exc}", tier=tier,
                                   url=self.url) from exc
            _warn_not_writable(tier, self.url, str(exc))
        else:
            # A directory filled by an earlier run needs nothing created, so a read-only mount
            # would otherwise go unsaid until the first refused write (access(2) reports EROFS).
            if check and not os.access(self.root / _TMP, os.W_OK):
                _warn_not_writable(tier, self.url, "read-only file system or no write permission")
        _mark(self.root, shared)

    @property
    def local_path(self) -> Path:
        return self.root

    def path(self, key: str) -> Path:
        """Where the complete file of ``key`` lives (it may not exist)."""
        check_key(key)
        return self.root / key[-32:-30] / key

    def read(self, key: str) -> bytes:
        try:
            with open(self.path(key), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise KeyError(key) from None

    def read_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with open(self.path(key), "rb") as handle:
                handle.seek(start)
                return handle.read(max(0, end - start))
        except FileNotFoundError:
            raise KeyError(key) from None

    def temp_path(self, key: str) -> Path:
        """A fresh temporary path for a file of ``key`` written in pieces (see :meth:`install`).

        It lies in this store's temporary directory, so :meth:`scan` sweeps it if its writer dies.
        """
        check_key(key)
        return self.root / _TMP / f"{key}.{os.getpid()}.{secrets.token_hex(4)}"

    def open_temp(self, temp: Path) -> BinaryIO:
        """Open the temporary file ``temp`` (from :meth:`temp_path`) for writing, created with this
        tier's file mode (0600 unless shared on purpose, :mod:`tierload.stores.dir_trust`).

        Raises:
            OSError: It cannot be created.
        """
        return open_new_file(temp, shared=self.shared)

    def install(self, key: str, temp: Path) -> None:
        """Rename a complete temporary file (from :meth:`temp_path`) into place as ``key``'s file.

        Raises:
            BackendError: The rename failed; the temporary file is removed.
        """
        final = self.path(key)
        try:
            final.parent.mkdir(mode=dir_mode(self.shared), exist_ok=True)
            os.replace(temp, final)
        except OSError as exc:
            self.discard_temp(temp)
            raise BackendError(f"cannot write block to the {self.tier} tier: {exc}", tier=self.tier,
                               key=key, url=self.url) from exc

    @staticmethod
    def discard_temp(temp: Path) -> None:
        """Remove a temporary file that will not be installed (absent: nothing to do)."""
        try:
            temp.unlink(missing_ok=True)
        except OSError:  # a read-only file system refuses even to unlink what is not there
            pass

    def write(self, key: str, data: bytes) -> None:
        final = self.path(key)
        tmp = self.temp_path(key)
        try:
            final.parent.mkdir(mode=dir_mode(self.shared), exist_ok=True)
            with self.open_temp(tmp) as handle:
                handle.write(data)
            os.replace(tmp, final)
        except OSError as exc:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:  # a read-only file system refuses even to unlink what is not there
                pass
            raise BackendError(f"cannot write block to the {self.tier} tier: {exc}", tier=self.tier,
                               key=key, url=self.url) from exc

    def size(self, key: str) -> int:
        try:
            return self.path(key).stat().st_size
        except FileNotFoundError:
            raise KeyError(key) from None

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise BackendError(f"cannot delete a block from the {self.tier} tier: {exc}", tier=self.tier,
                               key=key, url=self.url) from exc

    def contains(self, key: str) -> bool:
        return self.path(key).is_file()

    def scan(self) -> dict[str, int]:
        self._sweep_leftovers()
        found: dict[str, int] = {}
        for sub in self.root.iterdir():
            if sub.name == _TMP or not sub.is_dir():
                continue
            for entry in sub.iterdir():
                try:
                    found[check_key(entry.name)] = entry.stat().st_size
                except (ValueError, FileNotFoundError):
                    continue
        return found

    def _sweep_leftovers(self) -> None:
        """Remove temporary files whose writer is dead (none to sweep in a read-only directory)."""
        try:
            leftovers = list((self.root / _TMP).iterdir())
        except FileNotFoundError:
            return
        for leftover in leftovers:
            parts = leftover.name.rsplit(".", 2)
            writer_pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else -1
            if writer_pid < 0 or not pid_alive(writer_pid):
                try:
                    leftover.unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("cannot remove the leftover %s from the %s tier: %s", leftover, self.tier, exc)

    def __repr__(self) -> str:
        return f"LocalDirStore({self.url!r})"
