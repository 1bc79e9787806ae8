#!/bin/bash
# Alternating before (fddae2f, exported) / after (h25e) runs of the quick small-s3 bench, uptime with each.
cd /work/wt-h25e
for run in 1 2; do
  for side in before after; do
    out=/tmp/h25e/ab/$side-run$run; mkdir -p $out
    uptime > $out/uptime-before.txt
    if [ $side = before ]; then
      (cd /tmp/h25e/base && PYTHONPATH=/tmp/h25e/base timeout 600 nice /work/wt-h25e/.venv/bin/python -m tierload.cli.main bench --workload small-s3 --quick --contenders tierload --out $out > $out/stdout.txt 2>&1)
    else
      timeout 600 nice .venv/bin/tierload bench --workload small-s3 --quick --contenders tierload --out $out > $out/stdout.txt 2>&1
    fi
    echo "rc=$?" >> $out/stdout.txt
    uptime > $out/uptime-after.txt
    grep -E "rig ceiling:|epoch 1 |MISSED|met " $out/stdout.txt | head -4
  done
done
echo ALLDONE
