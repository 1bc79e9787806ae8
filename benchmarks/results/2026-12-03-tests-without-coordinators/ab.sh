#!/bin/bash
# ab.sh DIR LABEL
cd $1
s0=$(head -1 /proc/stat); t0=$(date +%s.%N)
.venv/bin/pytest -q -p no:randomly tests/test_layout_arrow.py tests/test_odd_inputs.py tests/test_layout_tokens.py tests/test_hardness_webdataset_fields.py tests/test_parquet_projection.py tests/test_parquet_projection_server_bytes.py > /tmp/ab-$2.log 2>&1
rc=$?
t1=$(date +%s.%N); s1=$(head -1 /proc/stat)
python3 - "$s0" "$s1" "$t0" "$t1" "$2" "$rc" "$(tail -1 /tmp/ab-$2.log)" <<'PY'
import sys
a=[int(x) for x in sys.argv[1].split()[1:]]; b=[int(x) for x in sys.argv[2].split()[1:]]
d=[y-x for x,y in zip(a,b)]
print(f"{sys.argv[5]}: busy {(sum(d)-d[3]-d[4])/100:.1f} CPU-s, wall {float(sys.argv[4])-float(sys.argv[3]):.1f} s, rc {sys.argv[6]}; {sys.argv[7]}")
PY
