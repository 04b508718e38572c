"""What one trainer step measured: the values its metrics record carries and the line it adds to the lineage.

Apart from the loop (loop.py keeps the step protocol: take, train, checkpoint, publish) because both are pure
arithmetic over the step's rows, and analytics reads both: `values` through rft.metrics, the lineage line through
the checkpoint's lineage segment (one line per step and rank, each experience id with its staleness)."""

from __future__ import annotations

import time
from typing import Any

from rftbus.ground.weights.staleness import staleness


def step_record(*, step: int, rank: int, version: int, ref: int, parts: dict[str, float], rows: list,
                groups: list, take: list, tokens: int, step_s: float, replayed: int) -> tuple[dict[str, Any], dict]:
    """(values, lineage line) of a step that trained `rows` (from `groups`: (record, group, sample indices)) of
    `take`, `replayed` rows drawn again beside them, in step_s. `ref`: the version staleness is counted from."""
    per_row = [staleness(ref, row.sample.model_version) for row in rows]
    stal = [s for s, row in zip(per_row, rows) if not row.expert]  # a demonstration has no policy version
    rewards = [row.sample.reward for row in rows if not row.expert and row.sample.reward is not None]
    line = {
        "step": step, "rank": rank, "version": version,
        "experience_ids": [row.sample.experience_id for row in rows],
        "staleness": per_row,  # per id (analytics)
        "groups": [g.group_id for _, g, _ in groups],
        "offsets": [[r.topic, r.partition, r.offset] for r, _ in take],
        "staleness_max": max(stal, default=0), "time_ms": int(time.time() * 1000),
    }
    values: dict[str, Any] = {
        **parts, "experiences": len(rows), "groups": len({g.group_id for r, g, _ in groups if r.lane != "expert"}),
        "tokens": tokens, "step_s": step_s, "replayed": replayed,
        "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
        "experiences_per_s": len(rows) / step_s if step_s else 0.0,
        "staleness_mean": sum(stal) / len(stal) if stal else 0.0, "staleness_max": max(stal, default=0)}
    if rewards:
        values["reward_mean"] = sum(rewards) / len(rewards)
    return values, line
