#!/bin/bash
# run.sh TAG PYTHONPATH
S=/work/main/benchmarks/results/2026-12-01-issue25-startup/join_startup.py
PY=/work/main/.venv/bin/python
tag=$1; pp=$2
for round in 1 2; do
  rm -rf /tmp/js/manifests /tmp/js/hot /tmp/js/exit
  (cd /tmp && PYTHONPATH=$pp $PY $S owner /tmp/js > /tmp/js/owner-$tag-$round.out 2>/tmp/js/owner-$tag-$round.err &)
  for i in $(seq 1 120); do grep -q first_sample /tmp/js/owner-$tag-$round.out 2>/dev/null && break; sleep 1; done
  echo "{\"tag\": \"$tag\", \"round\": $round, \"owner\": $(grep first_sample /tmp/js/owner-$tag-$round.out)}"
  for j in 1 2 3; do
    (cd /tmp && PYTHONPATH=$pp $PY $S join /tmp/js 2>/dev/null | grep first_sample | sed "s/^/{\"tag\": \"$tag\", \"round\": $round, \"join\": /; s/$/}/")
  done
  touch /tmp/js/exit; sleep 8
done
