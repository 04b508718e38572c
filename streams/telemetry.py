"""Stage counters, the status file and the periodic TrainerMetric records (kind=streams, task_pass_rate)."""

from __future__ import annotations

import os
import socket
import time
from collections import Counter

from rftbus.config import Config
from rftbus.schemas import TrainerMetric
from rftbus.status import write_status


class Counters:
    """Monotonic counts per stage; `reconcile` explains where every raw record went."""

    def __init__(self) -> None:
        self.c: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.by_stage: Counter[str] = Counter()
        self.started = time.time()

    def inc(self, name: str, n: int = 1) -> None:
        self.c[name] += n

    def reject(self, reason: str, stage: str, n: int = 1) -> None:
        self.rejected[reason] += n
        self.by_stage[stage] += n
        self.c["rejected"] += n

    def snapshot(self, open_samples: int, pending_feedback: int) -> dict:
        c = self.c
        return {
            "raw_in": c["raw_in"], "verified": c["verified"], "held_for_feedback": c["held_for_feedback"],
            "joined": c["joined"], "feedback_in": c["feedback_in"], "curated": c["curated"],
            "curated_priority": c["curated_priority"], "curated_normal": c["curated"] - c["curated_priority"],
            "expert_promoted": c["expert_promoted"], "groups_closed": c["groups_closed"],
            "rejected": c["rejected"], "rejected_by_reason": dict(self.rejected),
            "rejected_by_stage": dict(self.by_stage), "errors": c["errors"],
            # every raw record is in exactly one of these (the test and `rftbus run` check it)
            "raw_accounted": c["curated"] + sum(self.by_stage[s] for s in ("verify", "filter", "join", "streams"))
            + open_samples + pending_feedback,
            "replays_skipped": c["replays_skipped"], "recovery_scans": c["recovery_scans"], "open_samples": open_samples,
            "pending_feedback": pending_feedback,
        }


def worker_id(cfg: Config) -> str:
    return cfg.streams.worker_id or f"{socket.gethostname()}-{os.getpid()}"


class StatusFile:
    """The streams worker's status file; written from a Faust timer (see rftbus.status)."""

    def __init__(self, cfg: Config, wid: str):
        self.state_dir, self.wid = cfg.state_dir, wid

    def write(self, data: dict) -> None:
        write_status(self.state_dir, "streams", self.wid, data)


def metric(cfg: Config, kind: str, version: int, values: dict[str, float]) -> TrainerMetric:
    return TrainerMetric(model=cfg.model.name, kind=kind, step=0, version=version,
                         values={k: float(v) for k, v in values.items()})


def flat_counts(snapshot: dict) -> dict[str, float]:
    out = {k: float(v) for k, v in snapshot.items() if isinstance(v, (int, float))}
    out.update({f"rejected.{k}": float(v) for k, v in snapshot["rejected_by_reason"].items()})
    out.update({f"rejected_stage.{k}": float(v) for k, v in snapshot["rejected_by_stage"].items()})
    return out
