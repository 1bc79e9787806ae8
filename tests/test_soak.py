"""Soak: several epochs under a random mix of S3 faults (issue 12 item 8). Marked ``slow``.

Every GET that reaches the fault proxy draws a fault: 503 ServiceUnavailable, 503 SlowDown, a
stall longer than the read timeout, or a body that breaks off halfway. The hot tier holds a
third of the data set and there is no warm tier, so every epoch reads most blocks from S3 again
through the faults. Each epoch must yield every sample exactly once with its exact bytes.

Run with ``pytest -m slow tests/test_soak.py``.
"""

from __future__ import annotations

import random

import pytest
from cases_common import collect_raw, proxied
from faulty_s3 import FaultMix
from torch.utils.data import DataLoader

OBJECTS = 60
SIZE = 48 * 1024
EPOCHS = 5


@pytest.mark.slow
def test_five_epochs_under_mixed_faults_yield_every_sample_once_with_exact_bytes(
        s3, bucket, tier_config, make_dataset, faulty_s3):
    name, fs = bucket
    rng = random.Random(12)
    payloads = {f"{index:08d}".encode() + rng.randbytes(SIZE - 8) for index in range(OBJECTS)}
    by_index = {int(payload[:8]): payload for payload in payloads}
    fs.pipe({f"{name}/soak/{index:04d}.bin": payload for index, payload in by_index.items()})
    fs.invalidate_cache()
    # A transient fault per GET is 15% likely: a read fails for good only after 8 in a row
    # (0.15 ** 8: about 3e-7 per read). 503 ServiceUnavailable is the endpoint failing: it rides
    # the outage budget instead.
    faulty_s3.faults.mix = FaultMix(error_503=0.10, slow_down=0.05, stall=0.03, reset=0.07, stall_s=1.5, seed=7)
    config = tier_config(hot=f"{OBJECTS * SIZE // 3}", warm=None,
                         cold={"max_attempts": 8, "read_timeout_s": 0.5, "outage_budget_s": 60})
    dataset = make_dataset(f"s3://{name}/soak", config, layout="files", storage_options=proxied(s3, faulty_s3))
    for epoch in range(EPOCHS):
        dataset.set_epoch(epoch)
        seen = [bytes(sample) for samples, _ in DataLoader(dataset, batch_size=4, collate_fn=collect_raw)
                for sample in samples]
        indices = sorted(int(sample[:8]) for sample in seen)
        assert indices == list(range(OBJECTS)), f"epoch {epoch}: samples lost or repeated"
        assert all(sample == by_index[int(sample[:8])] for sample in seen), f"epoch {epoch}: wrong bytes"
    injected = faulty_s3.faults.mix.injected
    assert set(injected) == {"error_503", "slow_down", "stall", "reset"}, injected  # every kind was hit
    assert sum(faulty_s3.faults.gets.values()) > EPOCHS * OBJECTS // 2  # later epochs went back to S3
