"""The live reward: the taskset's score of the answers actually served, per minute.

The simulator appends one row per served answer to `<state_dir>/simulate/answers.jsonl` (a restarted
simulator appends to the same file, so the curve has no gap); `rftbus run`'s summary and `rftbus.apps.run.plots.plot_live` read it.
"""

from __future__ import annotations

import json
from pathlib import Path


def answers_path(state_dir: Path) -> Path:
    return Path(state_dir) / "simulate" / "answers.jsonl"


def read_answers(state_dir: Path) -> list[dict]:
    path = answers_path(state_dir)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line torn by a kill -9
            continue
    return out


def per_minute(rows: list[dict], start: float, bucket_s: float = 60.0) -> list[dict]:
    """[{minute, reward, exact, answers, version}] over `bucket_s` windows from `start` (epoch s)."""
    buckets: dict[int, list[dict]] = {}
    for r in rows:
        buckets.setdefault(int((r["t"] - start) // bucket_s), []).append(r)
    last = max((r["t"] for r in rows), default=start)
    out = []
    for k in sorted(b for b in buckets if b >= 0):
        rs = buckets[k]
        out.append({"minute": round((k + 1) * bucket_s / 60, 2), "reward": round(sum(r["r"] for r in rs) / len(rs), 4),
                    "exact": round(sum(r["x"] for r in rs) / len(rs), 4), "answers": len(rs),
                    "version": max(r["v"] for r in rs), "whole": start + (k + 1) * bucket_s <= last})
    return out


def summary(rows: list[dict], start: float, min_answers: int = 20) -> dict:
    """live_reward_initial: the first minute; live_reward_final: the last whole minute (the minute the
    run stopped in, and a minute with fewer than `min_answers` answers, are left out when others exist)."""
    curve = per_minute(rows, start)
    full = [b for b in curve if b["answers"] >= min_answers and b["whole"]] or curve
    return {"live_reward_initial": full[0]["reward"] if full else None,
            "live_reward_final": full[-1]["reward"] if full else None,
            "live_reward_best": max((b["reward"] for b in full), default=None),
            "live_answers": len(rows), "live_reward_by_minute": curve, "live_reward_by_version": per_version(rows)}


def per_version(rows: list[dict]) -> list[dict]:
    """[{version, answers, reward}]: what each served version earned from the graders (the gate's evidence,
    and what a version's held-out eval is read beside)."""
    by: dict[int, list[float]] = {}
    for r in rows:
        by.setdefault(int(r["v"]), []).append(float(r["r"]))
    return [{"version": v, "answers": len(rs), "reward": round(sum(rs) / len(rs), 4)} for v, rs in sorted(by.items())]
