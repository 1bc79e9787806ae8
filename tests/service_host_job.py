"""A training job without Ray in its own process, for tests of tierload's service host.

Run as ``python service_host_job.py MODE SPEC_JSON``; the spec names the dataset (``url``,
``missing_url``, ``storage_options``, ``size``: the bytes of each object written by
``helpers.put_indexed_objects``) and the ``config``. It never imports Ray itself. Each mode
prints one JSON line per event on stdout:

- ``read``: one epoch (event ``epoch``), one through a ``DataLoader`` whose persistent worker
  still runs when the job exits (forked after the host started: it must not keep the host
  alive), then ``done`` with the host's pid, the pids of every process under it, the node
  cache's pid, whether Ray was imported here and the node cache's state in this process.
- ``kill``: one epoch, SIGKILL to the host (event ``killed``, with the killed cache's pid), one
  epoch while the cache is gone and started again, a wait for the keeper's re-creation, one more
  epoch (``done``).
- ``missing``: a dataset over a prefix with no objects (event ``refused`` with the error's
  class), then whether its host ended by itself (``done``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


COUNT_IN_WORKER = 4  # samples read through the persistent DataLoader worker


def _epoch(dataset, size: int) -> dict:
    """Every sample of one epoch: the indexes seen, and how many had wrong bytes."""
    seen, wrong = [], 0
    for sample, _label in dataset:
        body = bytes(sample)
        index = int(body[:8].decode())
        wrong += body != f"{index:08d}".encode() + bytes(size - 8)
        seen.append(index)
    return {"seen": sorted(seen), "wrong": wrong}


def _host_processes() -> tuple[int, list[int]]:
    import psutil

    from tierload.deploy import host

    assert host._host is not None, "no service host was started"
    pid = host._host.process.pid
    return pid, [child.pid for child in psutil.Process(pid).children(recursive=True)]


def _wait_for_recreation(timeout_s: float) -> bool:
    from tierload.deploy.keeper import _keepers

    deadline = time.monotonic() + timeout_s
    while not any(keeper.recreated for keeper in _keepers.values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


_KEPT = []  # a DataLoader iterator (and its persistent worker) alive at exit


def main(mode: str, spec: dict) -> None:
    from tierload.deploy.keeper import _keepers
    from tierload.errors import TierloadError
    from tierload.loader.dataset import TieredDataset

    def dataset(url: str):
        return TieredDataset(url, spec["config"], storage_options=spec["storage_options"], layout="files",
                             batch_size=1)

    if mode == "missing":
        try:
            dataset(spec["missing_url"])
        except TierloadError as exc:
            from tierload.deploy import host

            let_go = host._letting_go[0].process if host._letting_go else None
            _emit("refused", error=type(exc).__name__, host_connected=host.host_connected(),
                  let_go=let_go.pid if let_go is not None else None)
            if let_go is not None:
                let_go.wait(120)
            _emit("done", host_ended=let_go is None or let_go.poll() is not None)
        return
    data = dataset(spec["url"])
    _emit("epoch", **_epoch(data, spec["size"]))
    if mode == "read":
        from torch.utils.data import DataLoader

        iterator = iter(DataLoader(data, batch_size=None, num_workers=1, persistent_workers=True))
        through_worker = sum(1 for _ in range(COUNT_IN_WORKER) if next(iterator) is not None)
        _KEPT.append(iterator)
        host_pid, processes = _host_processes()
        state = [keeper.lifecycle.state.value for keeper in _keepers.values()]
        _emit("done", host=host_pid, processes=processes, cache=data._endpoint.pid, through_worker=through_worker,
              ray_imported="ray" in sys.modules, states=state)
    elif mode == "kill":
        from tierload.deploy import host

        host_pid, _ = _host_processes()
        killed = host._host.process
        killed_cache = data._endpoint.pid
        os.kill(host_pid, signal.SIGKILL)
        killed.wait(60)  # a killed process takes a moment to end on a busy machine
        _emit("killed", host=host_pid, returncode=killed.returncode, cache=killed_cache)
        during = _epoch(data, spec["size"])
        back = _wait_for_recreation(180.0)
        after = _epoch(data, spec["size"])
        new_pid, processes = _host_processes()
        _emit("done", during=during, after=after, back=back, host=new_pid, processes=processes,
              ray_imported="ray" in sys.modules)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
