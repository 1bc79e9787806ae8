"""Issue 26 item 8's second half: the docs agree with each other and with the code.

``docs/training.md`` said a Parquet list holding nulls comes back as a Python list, while the
README and the code give ``{"values", "valid"}`` (the code's side: tests/test_odd_inputs.py reads
such lists from a real Parquet file through the dataset).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHAPE = '{"values": tensor, "valid": bool tensor}'


@pytest.mark.parametrize("doc", ["README.md", "docs/training.md"])
def test_each_doc_gives_a_nullable_parquet_list_the_codes_shape(doc):
    text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())  # wrapped lines as one
    assert SHAPE in text, f"{doc} does not say a Parquet list with nullable elements is {SHAPE}"
    assert not re.search(r"(list|lists) (holding|with) nulls?,? (comes back as |is |are )?a Python list", text), doc
