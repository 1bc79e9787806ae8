"""RSS of the training process stays flat over 20 epochs with a small hot tier (issue 5, item 6).

Marked slow (about a minute on 2 cores); ``benchmarks/rss_epochs.py`` prints the same measurement
with its setup. Bound: at most 16 MiB above the RSS after two warm-up epochs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from rss_epochs import measure  # noqa: E402

BOUND = 16 * 2**20


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_rss_is_flat_over_20_epochs_with_a_small_hot_tier(s3, ray_session, tmp_path, num_workers):
    readings = measure(s3, tmp_path, epochs=20, samples=150, size=4096, hot=64 * 1024, num_workers=num_workers,
                       bucket=f"rss-{num_workers}")
    growth = max(readings[2:]) - readings[1]
    print(f"\nRSS per epoch (MiB, num_workers={num_workers}): {[round(r / 2**20, 1) for r in readings]}; "
          f"growth after warm-up {growth / 2**20:.2f} MiB (bound {BOUND / 2**20:.0f} MiB)")
    assert growth <= BOUND
