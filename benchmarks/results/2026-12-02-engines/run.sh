#!/bin/bash
# Alternating runs of the two workloads, each with the engines side by side; uptime with each.
cd "$(git rev-parse --show-toplevel)"
for run in 1 2; do
  for wl in small-s3 default; do
    out=${OUT:-/tmp/h24/bench}/$wl-run$run
    mkdir -p $out
    uptime > $out/uptime-before.txt
    if [ $wl = small-s3 ]; then
      timeout 900 nice .venv/bin/tierload bench --workload small-s3 --quick --contenders tierload,tierload-obstore,s3torch --out $out > $out/stdout.txt 2>&1
    else
      timeout 900 nice .venv/bin/tierload bench --quick --contenders tierload,tierload-obstore,s3torch --repeats 2 --out $out > $out/stdout.txt 2>&1
    fi
    echo "rc=$?" >> $out/stdout.txt
    uptime > $out/uptime-after.txt
  done
done
echo ALLDONE > ${OUT:-/tmp/h24/bench}/done
