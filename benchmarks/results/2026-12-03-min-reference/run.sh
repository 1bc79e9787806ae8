#!/bin/bash
# run.sh N OUT: N runs of `tierload bench --quick --contenders tierload` into OUT/runI; prints, per run and
# epoch: the run's folder, the epoch (0-based), hot hits, staged hits and MIN's hits (each x 70 accesses),
# and samples/s. Uses the tierload and python on PATH (the project's venv activated).
out=${2:-/tmp/quick-runs}
for i in $(seq 1 "$1"); do
  rm -rf "$out/run$i"; mkdir -p "$out"
  tierload bench --quick --contenders tierload --out "$out/run$i" > "$out/run$i.log" 2>&1
  python - "$out/run$i" <<'PY'
import glob, json, sys
report = json.load(open(sorted(glob.glob(sys.argv[1] + "/*.json"))[0]))
for e in report["contenders"]["tierload"]["epochs"]:
    print(sys.argv[1], e["epoch"], round(e.get("hot_hit_ratio", 0) * 70, 1), round(e.get("staged_hit_ratio", -1) * 70, 1),
          round(e.get("min_hit_ratio", 0) * 70, 1), round(e["samples_per_s"], 1))
PY
done
