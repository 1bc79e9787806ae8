"""Hardness (issue 26 #14, case B51): an epoch under a low open-files limit (``ulimit -n 256``).

A real subprocess lowers RLIMIT_NOFILE to 256/256 before anything starts, then runs the local
S3 server, a local Ray and a two-worker DataLoader over 600 x 4 KiB objects (one pack) with the
default config: the epoch completes with every sample exact, or stops with a typed error that
names the limit and the setting to lower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # before anything starts
    from pathlib import Path

    import ray
    from torch.utils.data import DataLoader

    from tierload.loader.dataset import TieredDataset
    from tierload.errors import TierloadError
    from tierload_tools.s3local import LocalS3

    work = Path(sys.argv[1])
    out = {}
    with LocalS3() as s3:
        fs = s3.create_bucket("nofile")
        payloads = {}
        for index in range(600):
            body = f"{index:08d}".encode() + bytes(4096 - 8)
            fs.pipe_file(f"nofile/ds/obj-{index:06d}.bin", body)
            payloads[index] = body
        # Started as tierload starts its own local Ray and as tests/conftest.py starts the session's:
        # no API server, autoscaler monitor or idle workers, processes with no part in an epoch
        # (~3 CPU-s). Metrics stay on, as by default: the actor keeps its metrics connections.
        from tierload.deploy.local_ray import lean_local_ray, local_ray_system_config

        with lean_local_ray(metrics=True, log_to_driver=False):
            ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
                     object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False,
                     _system_config=local_ray_system_config(metrics=True))
        config = {"hot": {"dir": str(work / "hot")}, "warm": {"url": str(work / "warm")},
                  "manifest": {"cache_dir": str(work / "manifests")}}
        try:
            dataset = TieredDataset("s3://nofile/ds", config, storage_options=s3.storage_options, layout="files")
            out["blocks"] = len(dataset.manifest.blocks)
            got = []
            for batch in DataLoader(dataset, batch_size=16, num_workers=2, collate_fn=lambda b: [s[0] for s in b]):
                got.extend(bytes(sample) for sample in batch)
            out["samples"] = len(got)
            out["exact"] = sorted(got) == sorted(payloads.values())
            # The node cache said what it lowered (its log, as Ray keeps it).
            logs = Path(ray._private.worker._global_node.get_logs_dir_path())
            out["lowered"] = any("cold.max_in_flight=256 lowered to" in path.read_text(errors="replace")
                                 for path in logs.glob("worker-*.err"))
        except TierloadError as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            out["untyped"] = f"{type(exc).__name__}: {exc}"
        finally:
            ray.shutdown()
    print("RESULT " + json.dumps(out))
""")


def test_an_epoch_under_a_256_open_files_limit(tmp_path):
    # Metrics on, as by default (the tests' default is off, tests/conftest.py): their connections count too.
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                            timeout=400, cwd=tmp_path, env={**os.environ, "TIERLOAD_METRICS__ENABLED": "true"})
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stderr[-4000:]
    outcome = json.loads(lines[-1].removeprefix("RESULT "))
    assert "untyped" not in outcome, outcome
    if "error" in outcome:  # refused: the message names the limit and what to lower
        assert "RLIMIT_NOFILE" in outcome["error"] and "cold.max_in_flight" in outcome["error"], outcome
    else:
        assert outcome == {"blocks": 1, "samples": 600, "exact": True, "lowered": True}, outcome


def test_the_in_flight_limit_fits_the_open_files_limit_or_is_refused_by_name(caplog):
    import pytest

    from tierload.errors import ConfigError
    from tierload.stores.cold.open_files import in_flight_for_open_files

    assert in_flight_for_open_files(256, limit=65536, open_now=100) == 256  # room enough: as configured
    with caplog.at_level("WARNING", logger="tierload.stores.cold.open_files"):
        assert in_flight_for_open_files(256, limit=256, open_now=90) == 51  # (256 - 90 - 64) // 2
    assert "cold.max_in_flight=256 lowered to 51" in caplog.text and "RLIMIT_NOFILE is 256" in caplog.text
    with pytest.raises(ConfigError, match=r"RLIMIT_NOFILE=128 .*lower cold.max_in_flight \(now 256\)"):
        in_flight_for_open_files(256, limit=128, open_now=70)
