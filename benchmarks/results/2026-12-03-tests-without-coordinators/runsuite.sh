#!/bin/bash
# usage: runsuite.sh OUTDIR  (from repo root)
out=$1; mkdir -p $out
python3 benchmarks/results/2026-12-03-suite-cpu/cpusampler.py $out/cpu.json $out/stop &
s0=$(head -1 /proc/stat)
t0=$(date +%s)
PYTHONPATH=benchmarks/results/2026-12-02-suite-floor TTIME=$out/tt .venv/bin/pytest -p ttime -q > $out/log 2>&1
echo "rc=$?" >> $out/log
t1=$(date +%s)
s1=$(head -1 /proc/stat)
touch $out/stop
python3 - "$s0" "$s1" <<'PY' >> $out/log
import sys
a=[int(x) for x in sys.argv[1].split()[1:]]; b=[int(x) for x in sys.argv[2].split()[1:]]
d=[y-x for x,y in zip(a,b)]
busy=(sum(d)-d[3]-d[4])/100; print(f"busy CPU-s {busy:.0f} steal {d[7]/100:.0f} total {sum(d)/100:.0f}")
PY
echo "wall $((t1-t0))" >> $out/log
