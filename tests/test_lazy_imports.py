"""The training process's imports: what ``import tierload`` loads before anything is listed or read.

Each check runs a fresh interpreter (a real import, nothing already loaded by the test process).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tierload.stores.cold.location import COMMON_S3_OPTIONS, s3_option_names

# Loaded where they are used (a listing, a plan, an S3 client or read), not by the training
# process's imports: together ~30 MB of its RSS (benchmarks/results/2026-12-02-training-memory).
HEAVY = ("pyarrow.compute", "botocore.auth", "s3fs", "aiobotocore", "ray")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_dataset_module_loads_no_listing_planning_or_s3_library():
    assert _loaded_after("import tierload.loader.dataset") == []


def test_an_s3_location_with_common_options_is_resolved_without_s3fs():
    code = ("from tierload.config.loading import load_config\n"
            "from tierload.stores.cold.location import ColdLocation\n"
            "config = load_config({'cold': {'storage_options': {'endpoint_url': 'http://127.0.0.1:9', 'key': 'k', "
            "'secret': 's', 'client_kwargs': {'region_name': 'us-east-1'}}}})\n"
            "ColdLocation.resolve('s3://bucket/train', config.cold)")
    assert _loaded_after(code) == []


def test_the_common_s3_options_are_options_s3fs_takes():
    assert COMMON_S3_OPTIONS <= s3_option_names()
