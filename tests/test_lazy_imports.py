"""The training process's imports: what ``import tierload`` loads before anything is listed or read.

Each check runs a fresh interpreter (a real import, nothing already loaded by the test process).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tierload.stores.cold.location import COMMON_S3_OPTIONS, s3_option_names

# Loaded where they are used (a listing, a plan, an S3 client or read), not by the training
# process's imports: together ~30 MB of its RSS (benchmarks/results/2026-12-02-training-memory);
# pyarrow alone 25 MB more (benchmarks/results/2026-12-03-arrow-free-training).
HEAVY = ("pyarrow", "pyarrow.compute", "botocore.auth", "s3fs", "aiobotocore", "ray")


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


def test_a_head_through_obstore_loads_no_s3fs(bucket, s3):
    """A node cache checks a job's access to an S3 dataset with one HEAD (``AccessGate.admit``): through
    obstore, as its reads go, it makes no s3fs client; with ``cold.s3_engine: aiobotocore`` s3fs sends it.
    Both answer the object's size and the version its listing gives."""
    name, fs = bucket
    fs.pipe(f"{name}/ds/one", b"x" * 100)
    listed = fs.info(f"{name}/ds/one")["ETag"]
    for engine, loaded in (("obstore", []), ("aiobotocore", ["botocore.auth", "s3fs", "aiobotocore"])):
        code = ("from tierload.config.loading import load_config\n"
                "from tierload.stores.cold.source import ColdSource\n"
                f"config = load_config({{'cold': {{'storage_options': {s3.storage_options!r}, "
                f"'s3_engine': {engine!r}}}}})\n"
                f"info = ColdSource('s3://{name}/ds', config.cold).head('s3://{name}/ds/one')\n"
                "print(info.size, info.version)")
        done = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                               f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        answer, modules = done.stdout.strip().splitlines()[-2:]
        assert answer == f"100 {listed}", engine
        assert [m for m in json.loads(modules) if m != "pyarrow.compute"] == loaded, engine
