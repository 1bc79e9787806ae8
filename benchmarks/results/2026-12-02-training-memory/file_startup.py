"""The startup bench's training process at 1.28 M keys, over ``file://`` instead of the emulated S3.

``tierload bench --workload startup`` lists 1,281,167 keys through the emulated S3; on the shared
2-core box (load 19-27) that listing timed out (``EndpointUnreachableError`` after 786 s). This
runs the same measured process (``tierload_tools.bench.small.startup._start``: ``TieredDataset()``
and its first sample under its ``StepClock`` and ``MemoryWatch``, RSS after each step) over a
``file://`` prefix of 1,281,167 sparse 112,640-byte files in 1,000 folders (the bench's shape), with
the manifest cached by a first run (the helper lists the prefix then; later runs map the file, as
a job joining a node cache whose manifest is cached does). The training process also records its
RSS after ``import torch`` and after importing tierload's dataset module.

``python file_startup.py startup|baseline URL WORKDIR RESULT_JSON [--tracemalloc]``
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from pathlib import Path


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    return 0.0


def startup(url: str, workdir: str, trace: bool) -> dict:
    began = _rss_mb()
    import torch  # noqa: F401 - the user's import, measured

    after_torch = _rss_mb()
    import tierload.loader.dataset  # noqa: F401 - tierload's own imports, measured

    after_tierload = _rss_mb()
    modules_after_import = sorted(name for name in sys.modules if name.split(".")[0] in
                                  ("s3fs", "aiobotocore", "botocore", "ray", "pyarrow", "obstore", "pandas"))
    from tierload_tools.bench.small import startup as bench

    setup = {"url": url, "storage_options": {}, "workdir": workdir}
    config = bench._config(setup)
    if trace:
        tracemalloc.start(25)
    started = time.perf_counter()
    try:
        dataset, result = bench._start(setup, config, first_sample=True)
        top = []
        if trace:
            snapshot = tracemalloc.take_snapshot()
            _, peak = tracemalloc.get_traced_memory()
            top = [f"{stat.size / 1e6:8.2f} MB  {stat.count:8d} blocks  {stat.traceback.format()[-1].strip()}"
                   for stat in snapshot.statistics("lineno")[:25]]
            result["tracemalloc_peak_mb"] = peak / 1e6
            result["tracemalloc_top_held"] = top
    finally:
        bench._shutdown(config)
    result.update(rss_start_mb=began, rss_after_torch_mb=after_torch, rss_after_tierload_import_mb=after_tierload,
                  modules_after_import=sorted({m.split(".")[0] for m in modules_after_import}),
                  modules_at_end=sorted({name.split(".")[0] for name in sys.modules
                                         if name.split(".")[0] in ("s3fs", "aiobotocore", "botocore", "ray",
                                                                   "pyarrow", "obstore", "pandas")}),
                  total_s=time.perf_counter() - started)
    return result


def baseline() -> dict:
    from tierload_tools.bench.small.startup import baseline as bench_baseline

    return bench_baseline({})


def main(argv: list[str]) -> int:
    phase, *rest = argv
    if phase == "baseline":
        result = baseline()
        out = rest[0]
    else:
        url, workdir, out = rest[:3]
        result = startup(url, workdir, "--tracemalloc" in rest)
    Path(out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
