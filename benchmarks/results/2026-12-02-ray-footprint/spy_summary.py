"""Seconds of wall time per function (inclusive) in a ``py-spy record --idle --format raw`` file.

    python spy_summary.py RAW RATE [N]
"""

import collections
import sys

counts: collections.Counter = collections.Counter()
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    seen = set()
    for frame in stack.split(";"):
        name = frame.split(" (")[0] + " " + (frame.split("(")[1].split(":")[0].split("/")[-1] if "(" in frame else "")
        if name not in seen:
            seen.add(name)
            counts[name] += int(n)
rate = float(sys.argv[2])
for name, n in counts.most_common(int(sys.argv[3]) if len(sys.argv) > 3 else 40):
    print(f"{n / rate:7.2f} s  {name}")
