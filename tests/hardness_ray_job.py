"""A training job in its own process, for tests of Ray's lifecycle around tierload (issue 26).

Run as ``python hardness_ray_job.py MODE SPEC_JSON``; the spec names the dataset (``url``,
``url2``, ``storage_options``), the ``config`` and, for ``owner``, ``exit_when`` (a file whose
existence ends the job). Each mode prints one JSON line per event on stdout:

- ``epoch``: read one epoch, then exit (event ``done``).
- ``hold``: read one epoch, say ``ready``, then sleep until killed (a SIGTERM test).
- ``shutdown``: start tierload's local Ray in this process (as a script that uses Ray itself
  has it), read one epoch, ``ray.shutdown()``, wait 5 s and say whether Ray runs again, build a
  new dataset, iterate it and the old one (event ``done``).
- ``owner``: read one epoch with a local Ray of its own in this process, say ``ready`` with the
  Ray's GCS address and metrics port, wait for ``exit_when``.

The other modes start no Ray here: a process without Ray has tierload's service host start it
(:mod:`tierload.deploy.host`).
- ``joined``: read one epoch through a cache another job owns (no Ray here), say ``done`` with
  its stall figures and dataset id.
"""

from __future__ import annotations

import json
import sys
import time


def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _dataset(spec: dict, url: str):
    from tierload.loader.dataset import TieredDataset

    return TieredDataset(url, spec["config"], storage_options=spec["storage_options"], layout="files", batch_size=1)


def _epoch(dataset) -> int:
    return sum(1 for _ in dataset)


def main(mode: str, spec: dict) -> None:
    import ray

    if mode in ("shutdown", "owner"):
        from tierload.config.loading import load_config
        from tierload.deploy.runtime import ensure_ray

        ensure_ray(load_config(spec["config"]))
    dataset = _dataset(spec, spec["url"])
    samples = _epoch(dataset)
    if mode == "epoch":
        _emit("done", samples=samples, ray=ray.is_initialized())
    elif mode == "hold":
        _emit("ready", samples=samples, pid=__import__("os").getpid())
        while True:
            time.sleep(1)
    elif mode == "shutdown":
        ray.shutdown()
        time.sleep(5.0)  # the keeper looks once a second: time enough to (wrongly) start Ray again
        after_shutdown = ray.is_initialized()
        fresh = _dataset(spec, spec["url"])
        fresh_samples = _epoch(fresh)
        try:
            old: int | str = _epoch(dataset)
        except Exception as exc:  # noqa: BLE001 - the test says whether the type is a typed one
            old = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        _emit("done", samples=samples, after_shutdown=after_shutdown, fresh=fresh_samples, old=old)
    elif mode == "owner":
        context = ray.get_runtime_context()
        port = [node["MetricsExportPort"] for node in ray.nodes() if node["Alive"]][0]
        _emit("ready", samples=samples, gcs=context.gcs_address, metrics_port=port, cache_pid=dataset._endpoint.pid,
              node=context.get_node_id())
        while not __import__("os").path.exists(spec["exit_when"]):
            time.sleep(0.2)
    elif mode == "joined":
        _emit("done", samples=samples, ray=ray.is_initialized(), dataset_id=dataset.manifest.dataset_id,
              stall=dataset.stall_stats()["total"], cache_pid=dataset._endpoint.pid)
        time.sleep(float(spec.get("linger_s", 0)))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
