"""The order in which pytest-xdist hands the test files to its workers: the longest first.

With ``--dist loadfile`` a file runs whole on one worker. xdist's own order (files with the most
tests first) put the files made of a few long tests (a 3-node cluster, benchmark and demo runs,
torchrun, Ray heads, subprocess jobs) at the end of its queue, so the run ended with one or two
workers on them and the other cores idle. Here the files measured longest come first, in that
order, and the rest follow in xdist's order (most tests first, so the run ends on files of one or
two short tests): the longest-processing-time-first rule (R. L. Graham, "Bounds on
multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), 1969), which keeps a run's tail
short. ``--no-loadscope-reorder`` in ``pyproject.toml`` makes xdist keep this order.

Only the order of whole files changes; the tests inside a file keep theirs, and a run without
xdist (``-n 0``) keeps pytest's own order.
"""

from __future__ import annotations

import os

import pytest

# The longest files of the default run, longest first: the sum of their tests' setup, call and
# teardown seconds among the 100 slowest of `pytest --durations=100` over the whole suite on 2 cores
# (2026-12-01, a busy machine: 37 min); test_dataset.py (17 tests, most of them below that list's
# cut) by its own run. Every file of 25 s or more is here, so the run ends on short files.
LONGEST_FIRST = (
    "test_interrupts.py",
    "test_multinode.py",
    "test_hardness_ray_head.py",
    "test_demo.py",
    "test_bench_small.py",
    "test_dataset.py",
    "test_joining.py",
    "test_hardness_ray_lifecycle.py",
    "test_actor_removal.py",
    "test_resume.py",
    "test_ddp.py",
    "test_ray_train.py",
    "test_tier_dirs_ray.py",
    "test_elastic_ddp.py",
    "test_cases_recovery.py",
    "test_bench.py",
    "test_random_access.py",
    "test_hardness_open_files.py",
    "test_bench_mixture.py",
    "test_mixture.py",
    "test_packs.py",
    "test_listing.py",
    "test_hardness_webdataset_fields.py",
    "test_bench_tokens.py",
    "test_cases.py",
    "test_layout_tokens.py",
    "test_elastic_resume.py",
    "test_formats.py",
    "test_job_identity.py",
    "test_litter.py",
    "test_outage.py",
    "test_hardness_service_join.py",
    "test_loopback.py",
    "test_metrics.py",
)


def order_longest_first(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the files of :data:`LONGEST_FIRST` in its order, then every other
    file by its number of tests, most first; each file's tests stay together and in their order."""
    count: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        name = item.path.name
        count[name] = count.get(name, 0) + 1
        first_seen.setdefault(name, index)
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> tuple[int, int, int]:
        name = item.path.name
        if name in rank:
            return rank[name], 0, first_seen[name]
        return len(rank), -count[name], first_seen[name]

    items.sort(key=key)  # stable: a file's tests keep their order


@pytest.hookimpl(trylast=True)  # after the hooks that deselect tests (-m 'not slow')
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:  # each worker sends its collection, in this order, to xdist
        order_longest_first(items)
