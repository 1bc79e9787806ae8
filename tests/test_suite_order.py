"""The order xdist hands test files out in (tests/suite_order.py): the longest files first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from suite_order import LONGEST_FIRST, order_longest_first

TESTS = Path(__file__).parent


def _items(*names: str) -> list:
    return [SimpleNamespace(path=TESTS / name, name=f"{name}#{index}") for index, name in enumerate(names)]


def test_every_file_named_longest_first_is_a_test_file_here_and_named_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [name for name in LONGEST_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"renamed or removed: {missing}; update LONGEST_FIRST in tests/suite_order.py"


def test_the_longest_files_come_first_in_their_order_then_the_rest_by_test_count():
    longest, second = LONGEST_FIRST[0], LONGEST_FIRST[1]
    items = _items("test_a.py", "test_b.py", "test_b.py", second, "test_c.py", longest, second, "test_b.py",
                   "test_a.py")
    order_longest_first(items)  # type: ignore[arg-type]
    assert [item.name for item in items] == [
        f"{longest}#5", f"{second}#3", f"{second}#6",  # the named files, in LONGEST_FIRST's order
        "test_b.py#1", "test_b.py#2", "test_b.py#7",  # then most tests first, each file's in their order
        "test_a.py#0", "test_a.py#8",
        "test_c.py#4"]
