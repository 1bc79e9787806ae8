"""A small-object workload's report: the setup, a table, and the issue's targets (issue 11).

Targets are ratios measured in the same run, or absolute times and sizes where the issue
gives those; nothing here asserts, it reports ``met`` / ``MISSED``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tierload_tools.bench.small.profile import text as profile_text


def _later(rows: list[dict[str, Any]]) -> float:
    """Mean samples/s of epochs 2+ (NaN with a single epoch)."""
    values = [row["samples_per_s"] for row in rows[1:]]
    return statistics.fmean(values) if values else float("nan")


def _check(name: str, value: float | None, goal: str, met: bool | None, detail: str) -> dict[str, Any]:
    return {"target": name, "value": value, "goal": goal, "met": met, "detail": detail}


def _worker_growth(rows: list[dict[str, Any]]) -> float | None:
    workers = rows[-1].get("workers") if rows else None
    return max((w["uss_growth_mb"] for w in workers), default=None) if workers else None


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for this workload, each with its value and whether it is met."""
    checks: list[dict[str, Any]] = []
    contenders = report.get("contenders", {})
    if report["workload"] == "small-files":
        plain, tier = contenders.get("plain-files", {}), contenders.get("tierload-files", {})
        if plain.get("ok") and tier.get("ok"):
            first = tier["epochs"][0]["samples_per_s"] / plain["epochs"][0]["samples_per_s"]
            later = _later(tier["epochs"]) / _later(plain["epochs"])
            rates = f"{tier['epochs'][0]['samples_per_s']:.0f} vs {plain['epochs'][0]['samples_per_s']:.0f}"
            checks.append(_check("tierload / plain, epoch 1 samples/s", first, ">= 0.5", first >= 0.5, rates))
            checks.append(_check("tierload / plain, epochs 2+ samples/s", later, ">= 0.9", later >= 0.9,
                                 f"{_later(tier['epochs']):.0f} vs {_later(plain['epochs']):.0f}"))
    elif report["workload"] == "small-s3":
        tier, ceiling = contenders.get("tierload-s3", {}), report.get("ceiling", {}).get("objects_per_s")
        if tier.get("ok") and ceiling:
            goal = min(0.8 * ceiling, 5000.0)
            rate = tier["epochs"][0]["samples_per_s"]
            checks.append(_check("tierload epoch 1 samples/s", rate, f">= {goal:.0f} (min(0.8 x ceiling, 5000))",
                                 rate >= goal, f"rig ceiling {ceiling:.0f} objects/s; {rate / ceiling:.2f}x ceiling"))
    else:
        checks += _startup_targets(report)
    return checks


MANIFEST_STEP = "manifest helper (list, build, save in a child)"


def startup_sum(result: dict[str, Any]) -> float | None:
    """The manifest step (listed, built and saved by the forked helper: the listing's seconds are
    inside it, since the child's calls are not timed here) + registration + opening the first stream (s)."""
    steps = result.get("steps", {})
    parts = (MANIFEST_STEP, "registration", "open stream (incl. plan)")
    if not all(p in steps for p in parts):
        return None
    return sum(steps[p]["seconds"] for p in parts)


def _startup_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    checks = []
    result = report.get("startup", {})
    if result.get("ok"):
        seconds = startup_sum(result)
        if seconds is not None:
            checks.append(_check("manifest (incl. listing) + registration + first plan, s", seconds, "< 10",
                                 seconds < 10, f"{result['keys']} keys; the listing is timed inside the manifest step"))
        floor = report.get("baseline", {})
        above = (f"; {result['peak_rss_main_mb'] - floor['peak_rss_main_mb']:.0f} MB above a torch + plain "
                 f"DataLoader process ({floor['peak_rss_main_mb']:.0f} MB)") if floor.get("ok") else ""
        checks.append(_check("main-process peak RSS over start-up, MB", result["peak_rss_main_mb"], "< 300",
                             result["peak_rss_main_mb"] < 300,
                             f"{result['rss_before_mb']:.0f} MB before (Python, torch, tierload imported){above}"))
    memory = report.get("worker_memory", {})
    if memory.get("ok"):
        # The larger of the growth between epochs and within one (the epoch's order still held).
        growth = max(memory["max_uss_growth_mb"], memory.get("max_uss_growth_in_epoch_mb", 0.0))
        checks.append(_check("DataLoader worker USS growth over 2 epochs, MB", growth, "< 50", growth < 50,
                             f"{memory['startup']['keys']} keys; manifest walk without reads (see the notes)"))
    return checks


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _setup_lines(report: dict[str, Any]) -> list[str]:
    machine, options = report["machine"], report["options"]
    lines = [f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB; "
             f"Python {machine['python']}, torch {machine['torch']}"]
    data = report.get("dataset", {})
    if report["workload"] in ("small-files", "small-s3"):
        lines.append(f"workload {report['workload']}: {data.get('objects')} objects x {options['size']} B in "
                     f"{options['classes']} class folders ({data.get('url')}); layout files; hot tier > dataset, "
                     f"warm disabled; {options['num_workers']} persistent DataLoader workers, batch "
                     f"{options['batch_size']}, {options['epochs']} epochs, no compute step")
    else:
        lines.append(f"workload startup: synthetic listing of {options['startup_keys']} keys of "
                     f"{options['startup_size']} B in {options['classes']} class folders; worker memory at "
                     f"{options['memory_keys']} keys")
    if "page_cache" in data:
        lines.append(f"page cache: {data['page_cache']}")
    if "link" in report:
        lines.append("emulated S3 (own buckets served by the proxy, moto for the rest): "
                     + report["link"]["description"])
    if "ceiling" in report:
        c = report["ceiling"]
        lines.append(f"rig ceiling: {c['objects_per_s']:.0f} objects/s ({c['mb_s']:.1f} MB/s), {c['concurrency']} GETs "
                     f"in flight, {c['client']}")
    return lines


def _epoch_table(report: dict[str, Any]) -> list[str]:
    header = ("contender", "setup s", "epoch 1 /s", "epochs 2+ /s", "main RSS MB", "tree RSS MB", "worker USS +MB")
    rows = [header]
    for name, result in report.get("contenders", {}).items():
        if not result.get("ok"):
            rows.append((name, f"failed: {result.get('error')}"[:200], "", "", "", "", ""))
            continue
        epochs = result["epochs"]
        rows.append((name, _fmt(result["setup_s"], ".1f"), _fmt(epochs[0]["samples_per_s"], ".0f"),
                     _fmt(_later(epochs), ".0f"), _fmt(result.get("peak_rss_main_mb"), ".0f"),
                     _fmt(result.get("peak_rss_tree_mb"), ".0f"), _fmt(_worker_growth(epochs), ".1f")))
    widths = [max(len(str(r[i])) for r in rows if not str(r[1]).startswith("failed")) for i in range(len(header))]
    lines = ["  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w)
                       for i, (v, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    return lines + [f"{name:<{widths[0]}}  {reason}" for name, reason in report.get("not_run", {}).items()]


def _startup_table(report: dict[str, Any]) -> list[str]:
    lines = []
    floor = report.get("baseline", {})
    if floor.get("ok"):
        lines.append(f"baseline: a process with torch imported iterating a plain DataLoader: peak RSS "
                     f"{floor['peak_rss_main_mb']:.0f} MB")
    for title, result in (("start-up", report.get("startup")), ("worker memory", report.get("worker_memory"))):
        if not result:
            continue
        if not result.get("ok"):
            lines.append(f"{title}: failed: {result.get('error')}")
            continue
        start = result.get("startup", result)
        lines.append(f"{title}: {start['keys']} keys; TieredDataset() {start['construct_s']:.1f} s"
                     + (f", first sample {start['first_sample_s']:.2f} s" if start.get("first_sample_s") else "")
                     + f"; main RSS {start['rss_before_mb']:.0f} MB before, peak {start['peak_rss_main_mb']:.0f} MB")
        for name, step in start["steps"].items():
            anon = f" (anon {step['anon_after_mb']:.0f})" if "anon_after_mb" in step else ""
            lines.append(f"  {name:<30} {step['seconds']:8.2f} s  CPU {step.get('cpu_s', 0.0):7.2f} s  "
                         f"RSS after {step['rss_after_mb']:6.0f} MB{anon}")
        if start.get("steps_not_seen"):
            lines.append(f"  not seen: {', '.join(start['steps_not_seen'])}")
        if "reports" in result:
            lines.append(f"  walk of 2 epochs: {result['walk_s']:.1f} s; worker USS (MB) start -> after each epoch: "
                         + "; ".join(f"w{r['worker']} e{r['epoch'] + 1} {r['uss_start_mb']:.0f}->"
                                     f"{r.get('uss_in_epoch_mb', r['uss_mb']):.0f} (in the epoch)->{r['uss_mb']:.0f}"
                                     for r in result["reports"]))
    return lines


def standings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """tierload's samples/s over each other contender's in this run (epoch 1, and epochs 2+)."""
    contenders = {name: r for name, r in report.get("contenders", {}).items() if r.get("ok")}
    ours = next((r for name, r in contenders.items() if name.startswith("tierload")), None)
    if ours is None:
        return []
    rows = []
    for name, other in contenders.items():
        if name.startswith("tierload"):
            continue
        first = ours["epochs"][0]["samples_per_s"] / other["epochs"][0]["samples_per_s"]
        later = _later(ours["epochs"]) / _later(other["epochs"])
        rows.append({"against": name, "epoch1_ratio": first, "later_ratio": later})
    return rows


def table(report: dict[str, Any]) -> str:
    """The printed report: setup, figures, targets, profile summary."""
    lines = _setup_lines(report) + [""]
    lines += _startup_table(report) if report["workload"] == "startup" else _epoch_table(report)
    ranks = report.get("standings") or []
    if ranks:
        lines.append("tierload's samples/s over each other loader's (same run): "
                     + "; ".join(f"{r['against']} epoch 1 {r['epoch1_ratio']:.2f}x, epochs 2+ {r['later_ratio']:.2f}x"
                                 for r in ranks))
    checks = report.get("targets") or []
    if checks:
        lines.append("targets (issue 11):")
        for check in checks:
            shown = f"{check['value']:.3f}" if isinstance(check["value"], float) else str(check["value"])
            lines.append(f"  {'met' if check['met'] else 'MISSED':>6}  {check['target']}: {shown} "
                         f"(goal {check['goal']}; {check['detail']})")
    if report.get("profile", {}).get("roles"):
        lines += ["", f"profile of tierload's epoch 1 ({report['profile']['raw']}):", profile_text(report["profile"])]
    return "\n".join(lines)


def write(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Add the targets, then write ``<workload>.json`` and ``<workload>.txt`` into ``out_dir``."""
    report["targets"] = targets(report)
    report["standings"] = standings(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{report['workload']}.json", "txt": out_dir / f"{report['workload']}.txt"}
    paths["json"].write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    paths["txt"].write_text(table(report) + "\n", encoding="utf-8")
    return paths
