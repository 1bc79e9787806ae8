"""The token workload's report: a table per contender and epoch, with the link bound, and files.

Epoch 1 is set against the link bound: the emulated link's total bandwidth in tokens/s (2 bytes a
token), the most a loader that reads every token from S3 once can deliver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def link_bound_tokens_per_s(result: dict[str, Any]) -> float | None:
    """Tokens/s the emulated link carries at most (None: no total cap)."""
    total_mb_s = result["link"]["total_mb_s"]
    return total_mb_s * 1e6 / 2 if total_mb_s else None


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """Per contender: epoch 1 and later epochs' tokens/s, epoch 1 over the link bound (None without a cap)."""
    bound = link_bound_tokens_per_s(result)
    out = {}
    for name, run in result["contenders"].items():
        rows = run.get("epochs") or []
        if not run.get("ok") or not rows:
            continue
        later = [row["tokens_per_s"] for row in rows[1:]]
        out[name] = {"epoch1_tokens_per_s": rows[0]["tokens_per_s"],
                     "later_tokens_per_s": sum(later) / len(later) if later else None,
                     "epoch1_of_link_bound": rows[0]["tokens_per_s"] / bound if bound else None}
    return out


def table(result: dict[str, Any]) -> str:
    data, link = result["dataset"], result["link"]
    lines = [f"token workload: {data['files']} uint16 files, {data['bytes'] / 2**20:.0f} MiB, {data['tokens']} "
             f"tokens, {data['windows']} windows of {data['window']} tokens; link: {link['description']}",
             f"options: {json.dumps({k: v for k, v in result['options'].items() if k != 'peers_python'})}",
             "",
             f"{'contender':<16} {'epoch':>5} {'windows':>8} {'s':>8} {'windows/s':>10} {'Mtokens/s':>10} "
             f"{'S3 GETs':>8} {'S3 MB':>9} {'hot hit':>8}  digest"]
    for name, run in result["contenders"].items():
        if not run.get("ok"):
            lines.append(f"{name:<16} failed: {run.get('error')}")
            continue
        for row in run["epochs"]:
            hit = row.get("hot_hit_ratio")
            lines.append(f"{name:<16} {row['epoch'] + 1:>5} {row['samples']:>8} {row['seconds']:>8.1f} "
                         f"{row['samples_per_s']:>10.1f} {row['tokens_per_s'] / 1e6:>10.2f} {row['s3_gets']:>8} "
                         f"{row['s3_bytes'] / 1e6:>9.1f} {'' if hit is None else f'{hit:.2f}':>8}  {row['digest']}")
    for name, reason in result.get("not_run", {}).items():
        lines.append(f"{name:<16} {reason}")
    bound = link_bound_tokens_per_s(result)
    lines.append("")
    if bound:
        lines.append(f"link bound: {bound / 1e6:.2f} Mtokens/s ({link['total_mb_s']:g} MB/s at 2 bytes a token)")
    for name, fig in figures(result).items():
        later = fig["later_tokens_per_s"]
        share = fig["epoch1_of_link_bound"]
        lines.append(f"{name:<16} epoch 1 {fig['epoch1_tokens_per_s'] / 1e6:.2f} Mtokens/s"
                     + (f" = {share:.2f} x the link bound" if share is not None else "")
                     + (f"; epochs 2+ {later / 1e6:.2f} Mtokens/s" if later is not None else ""))
    conversion = result.get("conversion")
    if conversion is not None:
        lines.append("litdata conversion: " + (f"{conversion['seconds']:.1f} s (optimize(), TokensLoader, chunks of "
                                               f"{conversion['chunk_tokens']} tokens)" if conversion.get("ok")
                                               else f"failed: {conversion.get('error')}"))
    lines.append(f"digests of the windows read match across contenders and epochs: {result['digests_match']}")
    return "\n".join(lines)


def write(result: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write ``tokens.json`` (everything, with :func:`figures`) and ``tokens.txt`` (the table) in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "tokens.json", "txt": out_dir / "tokens.txt"}
    paths["json"].write_text(json.dumps({**result, "figures": figures(result)}, indent=1, default=str),
                             encoding="utf-8")
    paths["txt"].write_text(table(result) + "\n", encoding="utf-8")
    return paths
