"""How fast the trace simulator replays: accesses per second of CPU, per policy, one core.

The issue's target: 90 epochs of ImageNet-1k (1,281,167 one-sample blocks, sizes log-normal
around 110 KiB) through the default stack (clairvoyant hot + lfu warm) in under a minute on
one core (>= 2 M accesses/s), and Belady's MIN on the same trace in under a minute. Hot tier
25% and warm tier 50% of the data. Each line replays the whole trace once with the compiled
replay (``engine="fast"``); "hot only" stacks have no warm tier, "+warm lfu" ones add it.
Then the old-vs-new table: the reference (the Python policy classes) against the compiled
replay on a smaller trace (``--compare-epochs``), same counts, checked.

    .venv/bin/python benchmarks/simulator_speed.py                       # the full run
    .venv/bin/python benchmarks/simulator_speed.py --epochs 8 --policies clairvoyant --json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

from tierload.policies.registry import policy_names
from tierload.simulator.belady import min_hits
from tierload.simulator.fast import warm_up
from tierload.simulator.fast.tracegen import fast_job_trace
from tierload.simulator.stack import SimResult, StackSpec
from tierload.simulator.run import simulate
from tierload.simulator.trace import DatasetShape, JobSpec, Trace

HOT_POLICIES = policy_names("hot")
COUNTS = ("hot_hits", "warm_hits", "cold_misses", "cold_bytes", "cold_gets", "hot_promotions", "hot_demotions",
          "warm_promotions", "warm_demotions")


def _stacks(policies: list[str], hot: int, warm: int, no_warm: bool) -> list[tuple[str, StackSpec]]:
    stacks = []
    for policy in policies:
        stacks.append((f"{policy} (hot only)", StackSpec(policy, hot)))
        if not no_warm:
            stacks.append((f"{policy} +warm lfu", StackSpec(policy, hot, "lfu", warm)))
    return stacks


def _line(name: str, accesses: int, cpu_s: float, wall_s: float, hit_ratio: float) -> dict:
    return {"stack": name, "accesses": accesses, "cpu_s": round(cpu_s, 2), "wall_s": round(wall_s, 2),
            "accesses_per_cpu_s": round(accesses / cpu_s) if cpu_s else 0, "hot_hit_ratio": round(hit_ratio, 4)}


def _old_vs_new(trace: Trace, stacks: list[tuple[str, StackSpec]]) -> list[dict]:
    rows = []
    for name, spec in stacks:
        old, new = simulate(trace, spec, engine="reference"), simulate(trace, spec, engine="fast")
        same = all(getattr(old, c) == getattr(new, c) for c in COUNTS)
        rows.append({"stack": name, "reference_per_s": round(old.accesses_per_s),
                     "fast_per_s": round(new.accesses_per_s),
                     "speedup": round(new.accesses_per_s / old.accesses_per_s, 1) if old.accesses_per_s else 0.0,
                     "same_counts": same})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=1_281_167)
    parser.add_argument("--block-bytes", type=int, default=110 * 1024)
    parser.add_argument("--size-spread", type=float, default=0.6, help="Log-normal sigma of block sizes.")
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--hot-share", type=float, default=0.25)
    parser.add_argument("--warm-share", type=float, default=0.5)
    parser.add_argument("--policies", default=",".join(HOT_POLICIES))
    parser.add_argument("--no-warm", action="store_true", help="Only hot-tier stacks.")
    parser.add_argument("--compare-epochs", type=int, default=1,
                        help="Epochs of the old-vs-new trace (same dataset); 0 to skip.")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    say = (lambda *a, **k: None) if args.json else (lambda *a, **k: print(*a, **k, flush=True))

    warm_up()  # compile (or load the cache) before any clock starts
    shape = DatasetShape.uniform(args.blocks, args.block_bytes, size_spread=args.size_spread)
    started = time.perf_counter()
    trace = fast_job_trace(JobSpec(shape, epochs=args.epochs, world_size=args.world_size))
    generate_s = time.perf_counter() - started
    data = trace.distinct_bytes()
    hot, warm = int(args.hot_share * data), int(args.warm_share * data)
    stacks = _stacks(args.policies.split(","), hot, warm, args.no_warm)
    say(f"{len(trace):,} accesses to {args.blocks:,} blocks ({data / 2**30:.1f} GiB), {args.epochs} epochs, "
        f"{args.world_size} rank(s); trace generated in {generate_s:.1f} s; {platform.python_implementation()} "
        f"{platform.python_version()} on {platform.machine()}, load average {os.getloadavg()[0]:.1f}")
    rows = []
    cpu, wall = time.process_time(), time.perf_counter()
    ceiling = min_hits(trace.block, trace.block_bytes, hot, trace.node)
    rows.append(_line("Belady's MIN", len(trace), time.process_time() - cpu, time.perf_counter() - wall,
                      ceiling.hit_ratio))
    say(_format(rows[-1]))
    for name, spec in stacks:
        result: SimResult = simulate(trace, spec, engine="fast")
        rows.append(_line(name, result.accesses, result.cpu_seconds, result.seconds, result.hot_hit_ratio))
        say(_format(rows[-1]))
    del trace
    comparison: list[dict] = []
    if args.compare_epochs:
        small = fast_job_trace(JobSpec(shape, epochs=args.compare_epochs, world_size=args.world_size))
        say(f"\nold (reference, Python policy classes) vs new (compiled), {len(small):,} accesses:")
        comparison = _old_vs_new(small, stacks)
        for row in comparison:
            say(f"{row['stack']:<22} {row['reference_per_s']:>10,} /s -> {row['fast_per_s']:>12,} /s "
                f"({row['speedup']:>5.1f}x), same counts: {row['same_counts']}")
    if args.json:
        print(json.dumps({"accesses": int(np.int64(len(rows) and rows[0]["accesses"])), "blocks": args.blocks,
                          "epochs": args.epochs, "generate_s": round(generate_s, 2),
                          "load_average": os.getloadavg()[0], "rows": rows, "old_vs_new": comparison}, indent=2))


def _format(row: dict) -> str:
    return (f"{row['stack']:<22} {row['accesses_per_cpu_s']:>12,} accesses/s  (cpu {row['cpu_s']:6.1f} s, "
            f"wall {row['wall_s']:6.1f} s, hot hit {100 * row['hot_hit_ratio']:5.2f}%)")


if __name__ == "__main__":
    main()
