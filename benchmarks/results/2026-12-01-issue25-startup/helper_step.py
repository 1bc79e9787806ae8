"""Wall and CPU seconds of load_manifest_apart(refresh=True) over 1,000 files (file://), 5 runs,
in a process that has torch and tierload imported (the helper's start-up is what differs)."""
import json, os, resource, sys, tempfile, time
import torch  # noqa: F401 - a training process has it
import tierload
from tierload.config.models import ColdConfig, ManifestConfig
from tierload.data.manifest_helper import load_manifest_apart
from tierload.stores.cold.source import ColdSource

root = tempfile.mkdtemp(prefix="m25-helper-step-")
data = os.path.join(root, "data")
for folder in range(10):
    os.makedirs(os.path.join(data, f"c{folder}"))
    for index in range(100):
        with open(os.path.join(data, f"c{folder}", f"{index}.bin"), "wb") as out:
            out.write(b"x" * 100)
source = ColdSource("file://" + data, ColdConfig())
settings = ManifestConfig(cache_dir=os.path.join(root, "manifests"), pack_target_bytes=0)
walls, cpus, mine, faults = [], [], [], []
for _ in range(5):
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p0 = time.process_time(); f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    manifest, _ = load_manifest_apart(source, settings, "files", refresh=True)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    mine.append(round(time.process_time() - p0, 3)); faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    walls.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - p0 + (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime))
print(json.dumps({"tierload": tierload.__file__, "samples": manifest.num_samples,
                  "wall_s": [round(w, 3) for w in walls], "cpu_s_caller_plus_helper": [round(c, 3) for c in cpus], "cpu_s_caller": mine, "caller_minor_faults": faults}))
