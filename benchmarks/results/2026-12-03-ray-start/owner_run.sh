#!/bin/bash
# one owner run: $1 = before|after, $2 = fresh|cached, $3 = run number
cd /tmp/st_cwd
S=/work/main/benchmarks/results/2026-12-01-issue25-startup/join_startup.py
[ "$2" = fresh ] && rm -rf /tmp/st/manifests
rm -rf /tmp/st/hot /tmp/st/exit
if [ "$1" = before ]; then export PYTHONPATH=/tmp/before; else unset PYTHONPATH; fi
/work/main/.venv/bin/python $S owner /tmp/st > /tmp/st_out.txt 2>/tmp/st_err.txt &
PID=$!
for i in $(seq 1 600); do grep -q first_sample /tmp/st_out.txt 2>/dev/null && break; sleep 0.1; done
touch /tmp/st/exit; wait $PID
python3 -c "
import json,sys
r=json.loads([l for l in open('/tmp/st_out.txt') if 'first_sample' in l][-1]); r.update(version='$1', manifest='$2', run=$3); print(json.dumps(r))"
