"""A node cache finds a dataset's blocks by tier key through a hash index, not a dict of every block."""

from __future__ import annotations

import numpy as np

from tierload.data.blocks import Block
from tierload.node.key_index import KeyIndex, key_hash


def _blocks(count: int) -> list[Block]:
    return [Block.of(f"file:///data/{i}.bin", f"v{i}", 0, 100 + i) for i in range(count)]


def test_every_key_is_found_at_its_block_and_a_stranger_is_not():
    blocks = _blocks(2000)
    index = KeyIndex(blocks)
    assert len(index) == 2000
    assert [index.find(block.key) for block in blocks] == list(range(2000))
    assert index.find("stranger-00000000000000000000000000000000") is None
    hashes = np.array([key_hash(blocks[7].key), key_hash("stranger"), key_hash(blocks[1999].key)], np.uint64)
    assert index.positions(hashes).tolist() == [7, -1, 1999]
    assert KeyIndex([]).positions(hashes).tolist() == [-1, -1, -1] and KeyIndex([]).find(blocks[0].key) is None


def test_a_key_listed_twice_gives_both_blocks_lowest_first():
    blocks = _blocks(5)
    twice = [*blocks, blocks[2]]
    index = KeyIndex(twice)
    assert list(index.indexes(blocks[2].key)) == [2, 5] and index.find(blocks[2].key) == 2


def test_keys_whose_hashes_collide_are_told_apart_by_the_key(monkeypatch):
    import tierload.node.key_index as key_index

    blocks = _blocks(6)
    monkeypatch.setattr(key_index, "key_hash", lambda key: 42)  # every key in one bucket
    index = KeyIndex(blocks)
    assert [index.find(block.key) for block in blocks] == list(range(6))
    assert index.find("stranger") is None
