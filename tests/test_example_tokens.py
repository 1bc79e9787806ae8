"""examples/train_tokens.py runs as the docs say (issue 23: a runnable example of the token layout):
its demo corpus (three raw uint16 .bin files and a Megatron-LM pair) on moto's S3, read by the
script in its own process with 2 DataLoader workers, yields every window of the token stream once
per epoch, windows crossing file boundaries included. Real moto S3 over HTTP, a real local Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_train_tokens_example_reads_every_window_once(bucket, s3, tier_config, tmp_path, ray_session):
    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_tokens import demo_corpus
    finally:
        sys.path.remove(str(EXAMPLES))
    name, fs = bucket
    demo_corpus(fs, f"{name}/tokens", tokens_per_file=1000)  # tokens 0 .. 3999 over 4 files
    fs.invalidate_cache()
    config_path = tmp_path / "tierload.yaml"
    config_path.write_text(yaml.safe_dump(tier_config(hot="1MiB", warm=None).to_dict()), encoding="utf-8")
    record = tmp_path / "record.json"
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    done = subprocess.run([sys.executable, str(EXAMPLES / "train_tokens.py"), "--url", f"s3://{name}/tokens",
                           "--config", str(config_path), "--storage-options", json.dumps(s3.storage_options),
                           "--seq-len", "63", "--epochs", "2", "--batch-size", "4", "--vocab", "4096",
                           "--record", str(record)], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "62 windows of 64 tokens" in done.stdout and "32 tail tokens dropped" in done.stdout  # 4000 = 62 x 64 + 32
    seen = json.loads(record.read_text())
    for epoch in ("0", "1"):
        assert sorted(seen[epoch]) == [64 * k for k in range(62)]  # window k starts at token 64 k
    assert seen["0"] != seen["1"]
