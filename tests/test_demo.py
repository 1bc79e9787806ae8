"""``tierload demo`` end to end: real digits, local S3, local Ray, three epochs."""

from __future__ import annotations

import pytest

from tierload_tools.demo.run import run_demo


@pytest.mark.parametrize("layout", ["imagefolder", "parquet"])
def test_demo_learns_the_digits_through_the_tiers(ray_session, layout, monkeypatch):
    monkeypatch.delenv("TIERLOAD_METRICS__ENABLED")  # the README's main job, on its defaults (metrics on)
    results = run_demo(layout=layout, epochs=3, num_workers=2)
    assert [r.epoch for r in results] == [0, 1, 2]
    assert results[-1].accuracy > 0.9  # samples and labels arrive right (chance is 0.1)
    assert all(r.samples == 1437 for r in results)  # every training sample, every epoch
    first, later = results[0], results[1:]
    assert first.hit_ratio["cold"] == 1.0 and first.cold_gets > 0
    for result in later:
        assert sum(result.hit_ratio.values()) == pytest.approx(1.0)
        assert result.cold_bytes < first.cold_bytes  # the warm and hot tiers absorb reads
