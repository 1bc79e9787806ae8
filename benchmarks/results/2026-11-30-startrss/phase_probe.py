"""Per-phase memory of TieredDataset start-up (diagnosis script of branch startrss, not part of the package).

Each wrapped step (listing, manifest plan/save/open, Ray, registration, plan, stream) prints, on
entry and exit, the exact peak RSS since the previous event (the kernel's VmHWM, reset through
/proc/self/clear_refs after each event), the RSS split into anonymous and file pages, and glibc's
heap (mallinfo2: size, free inside it, mmapped). Exits with status 3 if anything imports pandas.

Usage: python phase_probe.py ENDPOINT_JSON WORKDIR, where ENDPOINT_JSON is
{"endpoint": "http://127.0.0.1:PORT", "creds": {"key": ..., "secret": ...}} of an EmulatedS3
serving the synthetic bucket "imagenet-synthetic" (prefix "train"), as `tierload bench
--workload startup` starts it.
"""
import functools
import importlib
import json
import os
import sys
import time


def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[k] = int(v.split()[0]) / 1000
    return out

import ctypes


class _MI(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
_libc = ctypes.CDLL("libc.so.6"); _libc.mallinfo2.restype = _MI
def _mallinfo():
    return _libc.mallinfo2()

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

EVENTS = []
T0 = time.perf_counter()
STACK = ["<top>"]

def event(name):
    s = status()
    try:
        import pyarrow as pa
        s["arrow"] = pa.total_allocated_bytes() / 1e6
    except Exception:
        pass
    try:
        mi = _mallinfo()
        s["heap"] = mi.arena / 1e6; s["heapfree"] = mi.fordblks / 1e6; s["mmapped"] = mi.hblkhd / 1e6
    except Exception:
        pass
    s["t"] = time.perf_counter() - T0
    s["event"] = name
    s["seg"] = STACK[-1]
    EVENTS.append(s)
    print(f"{s['t']:8.2f}s {name:45s} peak-in-seg {s['VmHWM']:7.1f} rss {s['VmRSS']:7.1f} anon {s['RssAnon']:7.1f} file {s['RssFile']:6.1f} heap {s.get('heap',0):6.1f} free {s.get('heapfree',0):6.1f} mmap {s.get('mmapped',0):6.1f}", flush=True)
    reset_peak()

STEPS = [("list", "tierload.stores.cold", "ColdSource.list_objects"),
    ("from_spill", "tierload.stores.listing", "ObjectListing.from_spill"),
    ("plan", "tierload.layouts.objects", "plan_objects"),
    ("build", "tierload.manifest", "build_manifest"),
    ("save", "tierload.manifest", "save_manifest"),
    ("open", "tierload.manifest", "open_manifest"),
    ("load_manifest", "tierload.dataset", "load_manifest"),
    ("node_endpoint", "tierload.dataset", "TieredDataset.start"),
    ("ray", "tierload.cache.runtime", "node_endpoint"),
    ("register", "tierload.dataset", "TieredDataset._register"),
    ("plan1", "tierload.dataset", "TieredDataset._plan"),
    ("open_stream", "tierload.dataset", "TieredDataset._open_stream")]

def wrap(name, module, path):
    owner = importlib.import_module(module)
    *parents, attr = path.split(".")
    for p in parents:
        owner = getattr(owner, p)
    orig = getattr(owner, attr)
    @functools.wraps(orig)
    def w(*a, **k):
        event(f"> {name}")
        STACK.append(name)
        try:
            return orig(*a, **k)
        finally:
            STACK.pop()
            event(f"< {name}")
    if isinstance(owner, type) and isinstance(owner.__dict__.get(attr), classmethod):
        func = orig.__func__
        @functools.wraps(func)
        def wc(cls, *a, **k):
            event(f"> {name}"); STACK.append(name)
            try:
                return func(cls, *a, **k)
            finally:
                STACK.pop(); event(f"< {name}")
        setattr(owner, attr, classmethod(wc))
    else:
        setattr(owner, attr, w)

def main():
    info = json.load(open(sys.argv[1]))
    import torch  # noqa
    import tierload  # noqa
    from tierload.config import load_config
    from tierload.dataset import TieredDataset
    event("imports")
    for s in STEPS:
        wrap(*s)
    work = sys.argv[2]
    os.makedirs(work, exist_ok=True)
    config = load_config({"hot": {"dir": os.path.join(work, "hot")}, "warm": {"url": None},
                          "manifest": {"cache_dir": os.path.join(work, "manifests")},
                          "ray": {"num_cpus": os.cpu_count() or 1}})
    storage = {**info["creds"], "client_kwargs": {"endpoint_url": info["endpoint"], "region_name": "us-east-1"}}
    t = time.perf_counter()
    ds = TieredDataset("s3://imagenet-synthetic/train", config=config, layout="files", storage_options=storage)
    event("constructed")
    it = iter(ds); next(it); it.close()
    event("first sample")
    print("construct+first", time.perf_counter() - t)
    json.dump(EVENTS, open(os.path.join(work, "events.json"), "w"))
    import ray

    from tierload.cache.runtime import stop_actors
    stop_actors(config); ray.shutdown()

if __name__ == "__main__":
    main()

import traceback as _tb


class _PandasTrap:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" and "pandas" not in sys.modules:
            print("PANDAS IMPORTED FROM:", flush=True); _tb.print_stack(limit=8); raise SystemExit(3)
            _tb.print_stack(limit=8)
        return None
sys.meta_path.insert(0, _PandasTrap())
