"""Arrow arrays built without pyarrow's pandas import (:mod:`tierload.arrow_values`).

Unit checks against ``pa.array``'s own results, and one fresh interpreter that lists a bucket
on moto's S3 server over HTTP, builds, saves and maps the manifest, and must not have
imported pandas (~35 MB of a start-up's RSS).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa

from tierload.arrow_values import from_numpy, int64_array, large_strings, string_scalar, to_numpy


def test_strings_equal_pa_array():
    values = ["s3://b/a b/ü.png", "", "日本/x", "q?=&%20"]
    assert large_strings(values).equals(pa.array(values, pa.large_string()))
    assert large_strings([]).equals(pa.array([], pa.large_string()))
    assert string_scalar("\x00").equals(pa.scalar("\x00", pa.large_string()))


def test_numbers_and_booleans_round_trip():
    for array in (np.arange(-3, 7, dtype=np.int64), np.arange(5, dtype=np.int32), np.array([], np.int64),
                  np.array([0.5, -1.0])):
        converted = from_numpy(array)
        assert converted.equals(pa.array(array)) and np.array_equal(to_numpy(converted), array)
    mask = np.array([True, False, True, True, False, False, False, False, True, False, True])
    assert from_numpy(mask).equals(pa.array(mask))
    for lo in range(4):  # a sliced bitmap starts mid-byte
        assert np.array_equal(to_numpy(from_numpy(mask).slice(lo, 6)), mask[lo:lo + 6])
    assert int64_array([1, 2**40]).equals(pa.array([1, 2**40], pa.int64()))
    assert np.array_equal(to_numpy(int64_array(range(10)).slice(3, 4)), [3, 4, 5, 6])


_START_PATH = textwrap.dedent("""
    import json, sys
    from tierload.config.loading import load_config
    from tierload.data.manifest_build import load_manifest
    from tierload.data.manifest_settings import manifest_settings
    from tierload.stores.cold.source import ColdSource
    options, url, cache = json.loads(sys.argv[1])
    config = load_config({"cold": {"storage_options": options}, "manifest": {"cache_dir": cache,
                          "exclude": ["_SUCCESS"]}, "hot": {"capacity_bytes": 2**30}})
    manifest = load_manifest(ColdSource(url, config.cold), manifest_settings(config), "files")
    print(json.dumps({"samples": manifest.num_samples, "packs": manifest.num_packs,
                      "pandas": "pandas" in sys.modules}))
""")


def test_listing_and_manifest_leave_pandas_unimported(s3, bucket, tmp_path):
    """S3 pages -> spilled listing -> plan (mixed packs, labels) -> save -> map, in a fresh process."""
    name, fs = bucket
    objects = {f"pre/{c}/{i:04d}.bin": b"x" * (i % 5) for c in ("a", "b", "c") for i in range(40)}  # some empty
    objects["pre/a/_SUCCESS"] = b""
    fs.pipe({f"{name}/{key}": body for key, body in objects.items()})
    argument = json.dumps([dict(s3.storage_options), f"s3://{name}/pre", str(tmp_path / "manifests")])
    done = subprocess.run([sys.executable, "-c", _START_PATH, argument], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["samples"] == 120 and result["packs"] >= 1
    assert result["pandas"] is False, "the start-up path imported pandas (through pa.array, pa.scalar or to_numpy)"
