"""Stage counters, the status file and the periodic TrainerMetric records (kind=streams, task_pass_rate)."""

from __future__ import annotations

import os
import socket
import time
from collections import Counter, deque

from rftbus.ground.config import Config
from rftbus.ground.schemas import TrainerMetric
from rftbus.ground.status import write_status


class Counters:
    """Monotonic counts per stage. Records: every raw record is rejected whole, decided, held for
    feedback or skipped as a replay. Experiences: every sample of a verified group is curated, rejected
    (by reason) or waiting for feedback. `snapshot` states both balances (the tests and `rftbus run` check them)."""

    def __init__(self) -> None:
        self.c: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()  # experiences (or whole undecodable records) by reason
        self.by_stage: Counter[str] = Counter()
        self.started = time.time()
        self.join_ms: deque[float] = deque(maxlen=20_000)  # feedback accepted -> grade applied to its group

    def join_latency(self, ms: float) -> None:
        self.join_ms.append(max(0.0, ms))

    def join_percentiles(self) -> dict:
        xs = sorted(self.join_ms)
        if not xs:
            return {"feedback_join_p50_s": None, "feedback_join_p99_s": None, "feedback_join_n": 0}
        at = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))] / 1000  # noqa: E731
        return {"feedback_join_p50_s": round(at(0.5), 3), "feedback_join_p99_s": round(at(0.99), 3),
                "feedback_join_n": len(xs)}

    def inc(self, name: str, n: int = 1) -> None:
        self.c[name] += n

    def reject(self, reason: str, stage: str, n: int = 1) -> None:
        self.rejected[reason] += n
        self.by_stage[stage] += n
        self.c["rejected"] += n

    def snapshot(self, held_groups: int, pending_feedback: int, unmatched_feedback: int = 0) -> dict:
        c = self.c
        waiting = c["waiting"]
        return {
            "raw_in": c["raw_in"], "verified": c["verified"], "records_rejected": c["records_rejected"],
            "groups_decided": c["groups_decided"], "held": c["held"], "held_groups": held_groups,
            "replays_skipped": c["replays_skipped"], "index_resent": c["index_resent"],
            "grade_resends_late": c["grade_resends_late"], "grades_before_group": c["grades_before_group"],
            # (replays_skipped counts the join's and the releases' too: a raw record's are apart)
            "raw_accounted": c["records_rejected"] + c["decided_from_raw"] + c["held"] + c["raw_replays_skipped"],
            "experiences_in": c["experiences_in"], "curated": c["curated"], "curated_groups": c["curated_groups"],
            "curated_priority": c["curated_priority"], "curated_normal": c["curated"] - c["curated_priority"],
            "waiting_for_feedback": waiting,
            "experiences_accounted": c["curated"] + c["rejected_experiences"] + waiting,
            "expert_promoted": c["expert_promoted"], "joined": c["joined"], "joined_groups": c["joined_groups"],
            "graded_past_eta": c["graded_past_eta"],  # graded answers curated staler than η (the feedback bound)
            "feedback_in": c["feedback_in"], "feedback_retries": c["feedback_retries"],
            "feedback_duplicate": self.rejected["duplicate_feedback"], "feedback_expired": self.rejected["feedback_expired"],
            **self.join_percentiles(),
            "rejected": c["rejected"], "rejected_by_reason": dict(self.rejected),
            "rejected_by_stage": dict(self.by_stage), "errors": c["errors"],
            "recovery_scans": c["recovery_scans"], "pending_feedback": pending_feedback,
            "unmatched_feedback": unmatched_feedback,  # feedback whose experience has not come (orphan at the TTL)
            "broker_retries": c["broker_retries"], "delivery_failures": c["delivery_failures"],
            "delivery_retried": c["delivery_retried"], "quarantined": c["quarantined"],
            # the traces stage (otel.enabled): records and spans read, calls made groups, grades, refusals by reason
            "traces": {k.removeprefix("traces."): v for k, v in c.items() if k.startswith("traces.")},
        }


def worker_id(cfg: Config) -> str:
    return cfg.streams.worker_id or f"{socket.gethostname()}-{os.getpid()}"


class StatusFile:
    """The streams worker's status file; written from a Faust timer (see rftbus.ground.status)."""

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
