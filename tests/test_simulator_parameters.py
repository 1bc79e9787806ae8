"""``tierload policy simulate``: every training parameter of the command line reaches the trace.

Each test runs the command twice, with one parameter changed, writes the trace it replayed
(``--save-trace``) and checks the change it must make: a parameter the command accepted but
did not pass on would leave the two traces equal and fail here. ``--workers`` and
``--batch-size`` are the exception the docs state: recorded, the same trace.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from tierload.cli.main import cli

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

BASE = ("--dataset", "40", "--epochs", "2", "--world-size", "2", "--hot-capacity", "25%",
        "--hot-policies", "keep", "--warm-policies", "keep")


def _trace(tmp_path, *changes: str, config: str = "configs/default.yaml") -> dict[str, np.ndarray]:
    """The columns of the trace the command replays with BASE, then ``changes`` (later options win)."""
    saved = tmp_path / f"trace-{len(list(tmp_path.glob('trace-*')))}.parquet"
    result = CliRunner().invoke(cli, ["policy", "simulate", config, *BASE, *changes, "--save-trace", str(saved),
                                      "--json"])
    assert result.exit_code == 0, result.output
    table = pq.read_table(saved)
    columns = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    columns["key"] = columns["key"].astype(np.int64)
    columns["setup"] = json.loads(result.stdout)["setup"]
    return columns


def _same_accesses(one: dict, other: dict) -> bool:
    return all(np.array_equal(one[name], other[name]) for name in ("key", "size_bytes", "node", "epoch"))


def test_epochs_world_size_and_nodes_shape_the_trace(tmp_path):
    base = _trace(tmp_path)
    assert len(base["key"]) == 2 * 40 and sorted(set(base["node"].tolist())) == [0, 1]
    longer = _trace(tmp_path, "--epochs", "3")
    assert len(longer["key"]) == 3 * 40 and longer["epoch"].max() == 2
    wider = _trace(tmp_path, "--world-size", "4")
    assert sorted(set(wider["node"].tolist())) == [0, 1, 2, 3]  # one node (hot tier) per rank
    assert np.bincount(wider["node"]).tolist() == [20] * 4
    # Both ranks on one node: the same accesses in the same order, all through one hot tier.
    one_node = _trace(tmp_path, "--nodes", "1")
    assert np.array_equal(one_node["key"], base["key"]) and set(one_node["node"].tolist()) == {0}
    # 4 ranks on 2 nodes: each node's accesses are two ranks' slices, not one rank's.
    packed = _trace(tmp_path, "--world-size", "4", "--nodes", "2")
    assert np.bincount(packed["node"]).tolist() == [40, 40]
    assert not np.array_equal(packed["key"][packed["node"] == 0], base["key"][base["node"] == 0])


def test_seed_shuffle_and_window_change_the_order_not_the_blocks(tmp_path):
    base = _trace(tmp_path)
    for change in (("--seed", "1"), ("--shuffle", "none")):
        other = _trace(tmp_path, *change)
        assert not np.array_equal(other["key"], base["key"]), change
        assert sorted(other["key"].tolist()) == sorted(base["key"].tolist()), change
    unshuffled = _trace(tmp_path, "--shuffle", "none")
    assert unshuffled["key"][unshuffled["node"] == 0][:20].tolist() == list(range(20))  # rank 0's contiguous slice
    # Block-aware shuffle over blocks of 4 samples: the window decides which blocks mix.
    narrow = _trace(tmp_path, "--samples-per-block", "4", "--shuffle", "block", "--window-blocks", "1")
    wide = _trace(tmp_path, "--samples-per-block", "4", "--shuffle", "block", "--window-blocks", "8")
    assert not np.array_equal(narrow["key"], wide["key"])
    # A window of one block reads each block's 4 samples as one run: one access per block and epoch.
    assert len(narrow["key"]) == 2 * 40


def test_jobs_stagger_and_drop_last(tmp_path):
    base = _trace(tmp_path)
    two = _trace(tmp_path, "--jobs", "2")
    assert len(two["key"]) == 2 * len(base["key"]) and sorted(set(two["node"].tolist())) == [0, 1, 2, 3]
    assert (two["setup"]["jobs"], two["setup"]["nodes"]) == (2, 4)  # every job on nodes of its own
    staggered = _trace(tmp_path, "--jobs", "2", "--stagger", "0.5")
    assert not np.array_equal(staggered["node"], two["node"])  # the second job starts half an epoch later
    assert sorted(staggered["key"].tolist()) == sorted(two["key"].tolist())
    # 41 samples on 2 ranks: padded to 42 per epoch by default, trimmed to 40 with --drop-last.
    padded = _trace(tmp_path, "--dataset", "41")
    trimmed = _trace(tmp_path, "--dataset", "41", "--drop-last")
    assert (len(padded["key"]), len(trimmed["key"])) == (2 * 42, 2 * 40)


def test_block_sizes_change_sizes_and_loader_settings_change_nothing(tmp_path):
    base = _trace(tmp_path)
    assert set(base["size_bytes"].tolist()) == {2**20}
    spread = _trace(tmp_path, "--block-size", "100KiB", "--size-spread", "0.5")
    assert len(set(spread["size_bytes"].tolist())) > 10
    assert abs(spread["size_bytes"].mean() / (100 * 1024) - 1) < 0.3
    # A rank's DataLoader yields the rank's order whatever its workers and batch size
    # (tierload/data/order.py, rule 3): recorded with the results, the same trace.
    loader = _trace(tmp_path, "--workers", "8", "--batch-size", "7")
    assert _same_accesses(loader, base)
    assert (loader["setup"]["dataloader_workers"], loader["setup"]["batch_size"]) == (8, 7)


def test_packs_of_a_listed_dataset_change_the_blocks(tmp_path):
    # 24 files of 1,000 bytes under a local prefix, listed like a bucket (file://).
    source = tmp_path / "data"
    source.mkdir()
    for index in range(24):
        (source / f"{index:03d}.bin").write_bytes(bytes([index]) * 1000)

    def config(pack_target: int) -> str:
        file = tmp_path / f"packs-{pack_target}.yaml"
        file.write_text(yaml.safe_dump({"manifest": {"cache_dir": str(tmp_path / f"manifests-{pack_target}"),
                                                     "pack_target_bytes": pack_target},
                                        "hot": {"dir": str(tmp_path / "hot")}}))
        return str(file)

    url = f"file://{source}"
    loose = _trace(tmp_path, "--dataset", url, "--layout", "files", config=config(0))
    packed = _trace(tmp_path, "--dataset", url, "--layout", "files", config=config(4000))
    assert len(set(loose["key"].tolist())) == 24 and set(loose["size_bytes"].tolist()) == {1000}
    # Packs of about 4,000 bytes: 6 blocks of 4 files each.
    assert len(set(packed["key"].tolist())) == 6 and set(packed["size_bytes"].tolist()) == {4000}
    assert loose["setup"]["blocks"] == 24 and packed["setup"]["blocks"] == 6
    # The manifest the listing left in manifest.cache_dir, given as --dataset: the same trace.
    files = sorted(path.name for path in (tmp_path / "manifests-4000").rglob("*") if path.is_file())
    cached = list((tmp_path / "manifests-4000").rglob("*.arrow"))
    assert len(cached) == 1 and files == [cached[0].name, cached[0].name + ".columns.json"], files  # and its index
    again = _trace(tmp_path, "--dataset", str(cached[0]), config=config(4000))
    assert _same_accesses(again, packed)
