"""CPU of deriving a rank's plan from seeds (what the node cache does at a stream's opening) at the
cached manifest of ``make_files.py``'s 1,281,167 files; ``python expand_cost.py MANIFEST_FILE``."""

import sys
import time

from tierload.data.manifest import open_manifest
from tierload.node.plan_expansion import expanded_plan  # SeededStreamPlan.expanded when these figures were taken
from tierload.wire.messages import SeededStreamPlan

manifest = open_manifest(sys.argv[1])
for shuffle in ("block", "sample"):
    for world in (1, 8):
        seeded = SeededStreamPlan(dataset_id=manifest.dataset_id, samples=manifest.samples_digest, epoch=3, seed=0, shuffle=shuffle, window_blocks=4,
                                  drop_last=False, rank=0, world=world)
        runs = []
        for _ in range(3):
            began, cpu = time.perf_counter(), time.process_time()
            plan = expanded_plan(seeded, manifest.sample_block)
            runs.append((time.perf_counter() - began, time.process_time() - cpu))
        print(f"shuffle={shuffle} world={world}: {len(plan.seq):,} positions; wall/CPU s "
              + ", ".join(f"{w:.3f}/{c:.3f}" for w, c in runs))
