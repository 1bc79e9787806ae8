"""Real tier-directory faults for tests/test_tier_dirs*.py: tmpfs mounts made by a test (and
remounted read-only under a running writer), a RAM level on a tiny tmpfs, and checks that the
fault is real and that a tier's accounting matches its files."""

from __future__ import annotations

import errno
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tierload.node.hot_tier import ram_level_dir
from tierload.wire.endpoint import ENDPOINT_FILE

REFUSES = "refuses writes"
FULL = "is full at"
TOO_BIG = "exceeds the size of its file system"

# ---------------------------------------------------------------------------- mounts
class Mounts:
    """tmpfs mounts made by one test, unmounted at its end."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def tmpfs(self, path: Path, size: str, *options: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        opts = ",".join((f"size={size}", "mode=0700", *options))
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
        self.paths.append(path)
        return path

    @staticmethod
    def remount(path: Path, read_only: bool) -> None:
        """Remount ``path`` read-only or read-write (a writer with a file open makes the kernel
        answer EBUSY for a moment: tried again until it goes through)."""
        mode = "ro" if read_only else "rw"
        deadline = time.monotonic() + 30
        while True:
            proc = subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], capture_output=True)
            if proc.returncode == 0:
                return
            assert time.monotonic() < deadline, proc.stderr.decode()
            time.sleep(0.005)

    def close(self) -> None:
        for path in reversed(self.paths):
            subprocess.run(["umount", "-l", str(path)], check=False)
        self.paths.clear()


@pytest.fixture(name="mounts")
def mounts_fixture():
    """``Mounts`` of this test, unmounted at its end."""
    made = Mounts()
    yield made
    made.close()


def assert_writes_fail(path: Path) -> None:
    """The fault is real: even root cannot write there."""
    try:
        (path / "probe").write_bytes(b"x")
    except OSError as exc:
        assert exc.errno in (errno.EROFS, errno.EACCES, errno.ENOSPC)
    else:
        raise AssertionError(f"{path} still takes writes")


def block_files(path: Path) -> dict[str, int]:
    """``{name: size}`` of the complete block files under a tier directory."""
    return {p.name: p.stat().st_size for p in path.rglob("*")
            if p.is_file() and ".tmp" not in p.relative_to(path).parts and p.name != ENDPOINT_FILE
            and not p.name.startswith(".tierload")}  # tierload's own files (owner lock, key, marker)


def tierload_lines(caplog, needle: str) -> int:
    return sum(needle in record.getMessage() for record in caplog.records if record.name.startswith("tierload"))


@pytest.fixture(name="small_ram_level")
def small_ram_level_fixture(tmp_path, mounts):
    """The RAM level's directory (in /dev/shm) on a 128 KiB tmpfs."""
    ram = Path(ram_level_dir(str(tmp_path / "hot")))
    mounts.tmpfs(ram, "128k")
    yield ram
    mounts.close()
    shutil.rmtree(ram, ignore_errors=True)
