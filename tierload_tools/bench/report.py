"""Turn a benchmark report (the dict :func:`tierload_tools.bench.run.run_bench` returns) into a
terminal table, a JSON file and a PNG chart, and check it against the issue's targets."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

PEERS = ("s3fs", "simplecache", "streaming", "litdata", "s3torch", "raydata")
COLUMNS = ("contender", "epoch", "samples/s", "stall", "S3 GETs", "S3 MB", "hit(B)", "hot hit", "MIN",
           "setup s", "convert s", "peak RSS MB")


def _later(rows: list[dict], key: str) -> float | None:
    """Mean of ``key`` over epochs 2+ (None with a single epoch)."""
    values = [row[key] for row in rows[1:] if key in row]
    return statistics.fmean(values) if values else None


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets on this run, each a ratio measured in the same run."""
    found = {name: entry for name, entry in report["contenders"].items() if entry.get("status") == "ok"}
    link = report["probe"]["link_bound_samples_s"]
    dataset_bytes = report["dataset"]["bytes"]
    checks: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: str, met: bool | None, detail: str) -> None:
        checks.append({"target": name, "value": value, "goal": goal, "met": met, "detail": detail})

    tier = found.get("tierload")
    if tier:
        rows = tier["epochs"]
        ratio = rows[0]["samples_per_s"] / link
        add("tierload epoch 1 samples/s / link bound", ratio, ">= 0.8", ratio >= 0.8,
            f"{rows[0]['samples_per_s']:.1f} vs {link:.1f} samples/s")
        later = _later(rows, "s3_bytes")
        if later is not None:
            add("tierload (warm off) epochs 2+ S3 bytes / dataset bytes", later / dataset_bytes, "<= 0.75",
                later / dataset_bytes <= 0.75, f"{later / 1e6:.1f} of {dataset_bytes / 1e6:.1f} MB per epoch")
            peers = {n: v for n, e in found.items() if n in PEERS and (v := _later(e["epochs"], "samples_per_s"))}
            own = _later(rows, "samples_per_s")
            if peers and own is not None:
                best = max(peers, key=lambda name: peers[name])
                ratio = own / peers[best]
                add("tierload (warm off) epochs 2+ samples/s / best peer", ratio, ">= 1.5", ratio >= 1.5,
                    f"best peer {best} at {peers[best]:.1f} samples/s")
    warm, ram = found.get("tierload-warm"), found.get("ram")
    if warm and len(warm["epochs"]) > 1:
        # Two or more epochs: every _later() below is a number.
        s3_later = float(_later(warm["epochs"], "s3_bytes") or 0.0)
        add("tierload-warm epochs 2+ S3 bytes", s3_later, "== 0", s3_later == 0, f"{s3_later / 1e6:.2f} MB per epoch")
        stall = float(_later(warm["epochs"], "stall_fraction") or 0.0)
        add("tierload-warm epochs 2+ stall fraction", stall, "< 0.05", stall < 0.05, f"{stall:.1%}")
        warm_rate = _later(warm["epochs"], "samples_per_s")
        ram_rate = _later(ram["epochs"], "samples_per_s") if ram else None
        if warm_rate is not None and ram_rate:
            ratio = warm_rate / ram_rate
            add("tierload-warm epochs 2+ samples/s / all-in-RAM", ratio, ">= 0.8", ratio >= 0.8,
                f"RAM bound {ram_rate:.1f} samples/s")
    return checks


def standings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """tierload's samples/s over each other contender's in this run: epoch 1 and the mean of epochs 2+."""
    found = {name: entry for name, entry in report["contenders"].items() if entry.get("status") == "ok"}
    ours = found.get("tierload")
    if ours is None:
        return []
    rows = []
    for name, entry in found.items():
        if name.startswith("tierload"):
            continue
        first = ours["epochs"][0]["samples_per_s"] / entry["epochs"][0]["samples_per_s"]
        own, theirs = _later(ours["epochs"], "samples_per_s"), _later(entry["epochs"], "samples_per_s")
        rows.append({"against": name, "epoch1_ratio": first,
                     "later_ratio": own / theirs if own is not None and theirs else None})
    return rows


def link_lines(report: dict[str, Any]) -> list[str]:
    """Where each contender's epoch 1 went against the link (from the emulated link's timeline):
    start-up before its first GET, the link's time from first to last byte and its mean rate
    then, the tail after the last byte; tierload's MB/s per second of epoch 1 (the run whose
    samples/s is the median's)."""
    lines = []
    for name, entry in report["contenders"].items():
        if entry.get("status") != "ok" or not entry["epochs"] or not entry["epochs"][0].get("link"):
            continue
        row = entry["epochs"][0]
        link, seconds = row["link"], row["seconds"]
        if link["first_byte_s"] is None:
            continue
        if link["first_get_s"] is None or row.get("s3_gets") == 0:
            # e.g. the RAM contender: it read everything before iter(loader) (the exact counters
            # saw no GET in the epoch); what the timeline's 50 ms bin straddling the start holds
            # is the end of those reads
            lines.append(f"  {name:<13} {seconds:6.1f} s: no GET during epoch 1 (its data was read before it)")
            continue
        busy_s = link["last_byte_s"] - link["first_byte_s"]
        rate = row["s3_bytes"] / busy_s / 1e6 if busy_s > 0 else 0.0
        lines.append(f"  {name:<13} {seconds:6.1f} s: first GET at {link['first_get_s']:.2f} s, bytes from "
                     f"{link['first_byte_s']:.2f} to {link['last_byte_s']:.2f} s ({rate:.1f} MB/s then), "
                     f"{seconds - link['last_byte_s']:.2f} s after the last byte")
        if name == "tierload":
            bound = report["probe"]["link_bound_samples_s"]
            after = row["samples"] / (seconds - link["first_get_s"]) / bound if seconds > link["first_get_s"] else 0.0
            lines.append(f"  tierload epoch 1 / link bound: {row['samples_per_s'] / bound:.3f} as measured; "
                         f"{after:.3f} counting from its first GET (the {link['first_get_s']:.2f} s before it are "
                         "DataLoader workers starting and the stream opening; the bound counts only link time)")
            lines.append("  tierload MB/s per second: " + " ".join(f"{value:g}" for value in link["mb_s"]))
    if lines:
        lines.insert(0, "the link during epoch 1 (from iter(loader); 50 ms bins):")
    return lines


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(report: dict[str, Any]) -> str:
    """The terminal table: setup, then one row per contender and epoch, then the targets."""
    machine, workload, link, probe = report["machine"], report["workload"], report["link"], report["probe"]
    data = report["dataset"]
    lines = [
        f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, GPU: {machine['gpu']}; "
        f"Python {machine['python']}, torch {machine['torch']}"
        + (f"; peers env: {', '.join(f'{k} {v}' for k, v in report['peer_versions'].items())}"
           if report.get("peer_versions") else ""),
        f"workload: {data['samples']} JPEGs, mean {data['mean_sample_bytes'] / 1024:.0f} KiB "
        f"({data['bytes'] / 1e6:.0f} MB); hot capacity {workload['hot_fraction']:.0%} = "
        f"{data['hot_capacity_bytes'] / 1e6:.0f} MB; {workload['epochs']} epochs; batch {workload['batch_size']}; "
        f"{workload['num_workers']} workers; compute {workload['step_ms']:g} ms/step (sleep)",
        f"emulated S3 (moto + shaping proxy on 127.0.0.1): {link['description']}",
        f"server raw {probe['server_raw_mb_s']:.1f} MB/s, emulated link {probe['emulated_link_mb_s']:.1f} MB/s "
        f"(16 GETs in flight); link bound {probe['link_bound_mb_s']:.1f} MB/s = "
        f"{probe['link_bound_samples_s']:.1f} samples/s",
        f"runs: each figure is the median of {report['repeats']} run(s) per contender",
        "",
    ]
    rows = [COLUMNS]
    notes = []
    for name, entry in report["contenders"].items():
        if entry.get("status") != "ok":
            reason = (entry.get("reason") or "").strip().splitlines()
            rows.append((name, "-", f"{entry.get('status')}: {reason[0] if reason else ''}"[:240], *[""] * 9))
            continue
        conversion = entry.get("conversion")
        for row in entry["epochs"]:
            first = row["epoch"] == 0
            rows.append((
                name if first else "", str(row["epoch"] + 1), _fmt(row["samples_per_s"], ".1f"),
                _fmt(row["stall_fraction"], ".1%"), _fmt(row["s3_gets"], ".0f"), _fmt(row["s3_bytes"] / 1e6, ".1f"),
                _fmt(row["byte_hit_ratio"], ".1%"), _fmt(row.get("hot_hit_ratio"), ".1%"),
                _fmt(row.get("min_hit_ratio"), ".1%") + ("" if row.get("min_exact", True) else "*"),
                _fmt(entry["setup_s"], ".1f") if first else "",
                (_fmt(conversion["seconds"], ".1f") if conversion else "-") if first else "",
                _fmt(entry["peak_rss_bytes"] / 1e6, ".0f") if first else ""))
        if entry.get("notes"):
            notes.append(f"{name}: {entry['notes']}")
    measured = [r for r in rows if r[1] != "-"]
    widths = [max(len(str(r[i])) for r in measured) for i in range(len(COLUMNS))]
    for r in rows:
        if r[1] == "-":
            lines.append(f"{r[0]:<{widths[0]}}  {r[2]}")
            continue
        cells = enumerate(zip(r, widths, strict=True))
        lines.append("  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in cells))
    lines += ["", "hit(B): share of the epoch's sample bytes not read from S3 during it; hot hit: tierload's own "
              "counter (share of accesses served by the hot tier; an access is one run of a block's samples in a "
              "rank's order, so consecutive samples of one block are one access; an access served by a copy the "
              "hot tier refused, held in memory for the prefetch window, is not one); MIN: Belady's MIN hit ratio on "
              "the same accesses at the hot capacity, the optimum when blocks have one size (hot hit <= MIN over "
              "the run); MIN*: blocks of different sizes, where Belady's rule is a reference a policy may beat, "
              "not a bound (the optimum is NP-hard: Chrobak et al. 2012); peak RSS: the contender's whole process "
              "tree (loader workers, Ray)."]
    if notes:
        lines += ["notes:"] + [f"  {note}" for note in notes]
    lines += link_lines(report)
    ranks = report.get("standings") or []
    if ranks:
        lines.append("tierload (warm off) samples/s over each contender's, same run (epoch 1 / epochs 2+):")
        lines += [f"  {r['against']:<12} {r['epoch1_ratio']:6.2f}x / {_fmt(r['later_ratio'], '.2f')}x" for r in ranks]
    checks = report.get("targets") or []
    if checks:
        lines.append("targets (issue 6, part 5):")
        for check in checks:
            mark = "met" if check["met"] else "MISSED"
            value = check["value"]
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            lines.append(f"  {mark:>6}  {check['target']}: {shown} (goal {check['goal']}; {check['detail']})")
    return "\n".join(lines)


def chart(report: dict[str, Any], path: Path) -> Path:
    """A PNG bar chart: samples/s per epoch per contender, with the link bound as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = {n: e for n, e in report["contenders"].items() if e.get("status") == "ok"}
    epochs = max((len(e["epochs"]) for e in ran.values()), default=0)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(ran) * max(1, epochs) / 2 + 3), 4.5), dpi=110)
    width = 0.8 / max(1, len(ran))
    for i, (name, entry) in enumerate(ran.items()):
        xs = [row["epoch"] + (i - (len(ran) - 1) / 2) * width for row in entry["epochs"]]
        ax.bar(xs, [row["samples_per_s"] for row in entry["epochs"]], width, label=name)
    link = report["probe"]["link_bound_samples_s"]
    ax.axhline(link, color="black", linestyle="--", linewidth=1)
    ax.annotate(f"link bound {link:.0f} samples/s", (0.01, link), xycoords=("axes fraction", "data"),
                va="bottom", ha="left", fontsize=8)
    ax.set_xticks(range(epochs), [f"epoch {e + 1}" for e in range(epochs)])
    ax.set_ylabel("samples/s (median)")
    data, machine = report["dataset"], report["machine"]
    ax.set_title(f"{data['samples']} x {data['mean_sample_bytes'] / 1024:.0f} KiB JPEGs, hot "
                 f"{report['workload']['hot_fraction']:.0%}, {report['link']['description']}\n"
                 f"{machine['cores']} cores, median of {report['repeats']} run(s)", fontsize=8)
    if ran:
        ax.legend(fontsize=8, ncol=2, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Add the targets, then write ``bench.json``, ``bench.png`` and ``bench.txt`` into ``out_dir``."""
    report["targets"] = targets(report)
    report["standings"] = standings(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "bench.json", "png": out_dir / "bench.png", "txt": out_dir / "bench.txt"}
    paths["json"].write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    chart(report, paths["png"])
    paths["txt"].write_text(table(report) + "\n", encoding="utf-8")
    return paths
