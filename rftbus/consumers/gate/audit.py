"""Auditing what the gate let serve, from the log alone (topics.raw's live answers and topics.decisions).

- every served answer's version (lineage and number) has a promote or canary decision that precedes it, and the
  decision its record names (`gate_decision`) is on the log and precedes it too;
- no session saw two versions (a session keeps the version it started with);
- each rollback: how long after its candidate's first canary answer it came, and until when new sessions still
  started on the candidate (serve re-pointing to the serving version).
Pure over records (tested without a broker); `audit_log` reads the two topics once to their ends.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rftbus.ground.config import Config
from rftbus.ground.models.lineage import label
from rftbus.ground.schemas import DecodeError, ExperienceGroup, GateDecision, Source, make_codec

LICENSING = ("promote", "canary")


@dataclass(frozen=True)
class Answer:
    at_ms: int  # when it was recorded (after its generation)
    lineage: str
    version: int
    session: str | None
    decision: str | None  # the decision id its record names
    arm: str | None
    started_ms: int | None = None  # when its generation began (routed before that); None: at_ms


def answers_of(group: ExperienceGroup) -> list[Answer]:
    if group.source != Source.live:
        return []
    m = group.metadata
    return [Answer(group.created_at, m.get("gate_lineage", ""), s.model_version, m.get("session_id"),
                   m.get("gate_decision"), m.get("gate_arm"), group.created_at - int(s.generation_ms))
            for s in group.samples]


def audit(answers: list[Answer], decisions: list[GateDecision], examples: int = 5) -> dict:
    first_license: dict[tuple[str, int], int] = {}
    decided_at: dict[str, int] = {}
    for d in decisions:
        decided_at.setdefault(d.decision_id, d.created_at)
        if d.decision in LICENSING:
            key = (d.lineage, d.version)
            first_license[key] = min(first_license.get(key, d.created_at), d.created_at)
    unlicensed: list[str] = []
    unnamed = 0
    by_session: dict[str, set[tuple[str, int]]] = defaultdict(set)
    session_start: dict[str, tuple[int, tuple[str, int]]] = {}  # session -> (its first answer, its version)
    first_canary_answer: dict[tuple[str, int], int] = {}
    for a in answers:
        key = (a.lineage, a.version)
        lic = first_license.get(key)
        named = decided_at.get(a.decision or "")
        if lic is None or lic > a.at_ms or named is None or named > a.at_ms:
            unlicensed.append(f"{label(*key)} at {a.at_ms} (decision {a.decision or 'none'})")
        if a.decision is None:
            unnamed += 1
        if a.session is not None:
            by_session[a.session].add(key)
            began = a.started_ms if a.started_ms is not None else a.at_ms
            if a.session not in session_start or began < session_start[a.session][0]:
                session_start[a.session] = (began, key)
        if a.arm == "canary":
            first_canary_answer[key] = min(first_canary_answer.get(key, a.at_ms), a.at_ms)
    switched = {s: v for s, v in by_session.items() if len(v) > 1}
    rollbacks = []
    for d in decisions:
        if d.decision == "rollback":
            key = (d.lineage, d.version)
            first = first_canary_answer.get(key)
            late = [t for t, k in session_start.values() if k == key and t >= d.created_at]
            rollbacks.append({"version": label(*key), "lineage": d.lineage, "rolled_back_ms": d.created_at,
                              "first_canary_answer_ms": first,
                              "s_after_first_canary_answer": round((d.created_at - first) / 1000, 1)
                              if first is not None else None,
                              # sessions whose first generation began after the rollback and still ran on it
                              # (serve re-points within seconds; a call routed before it may wait in the batch queue)
                              "new_sessions_after": len(late),
                              "last_new_session_s_after": round((max(late) - d.created_at) / 1000, 1) if late else 0.0,
                              "reason": d.reason[:200]})
    promotes: dict[str, int] = defaultdict(int)
    for d in decisions:
        if d.decision == "promote":
            promotes[d.lineage] += 1
    return {"answers": len(answers), "unlicensed_answers": len(unlicensed), "unlicensed_examples": unlicensed[:examples],
            "answers_naming_no_decision": unnamed, "sessions": len(by_session),
            "sessions_that_switched_version": len(switched),
            "switched_examples": {s: sorted(label(*k) for k in v) for s, v in list(switched.items())[:examples]},
            "promotes_by_lineage": dict(promotes), "rollbacks": rollbacks,
            "ok": not unlicensed and not switched}


def audit_log(cfg: Config, timeout_s: float = 60.0, decisions: list[GateDecision] | None = None) -> dict:
    """The audit of everything on topics.raw and topics.decisions now (`decisions`: already read by the caller)."""
    from rftbus.ground.kafka.read import read_to_end
    from rftbus.ground.weights.decisions import decisions_so_far

    if decisions is None:
        decisions = decisions_so_far(cfg, timeout_s=timeout_s, strict=False)
    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer()
    answers: list[Answer] = []
    for m in read_to_end(cfg, cfg.topics.raw.name, timeout_s=timeout_s, strict=False):
        try:
            rec = decode(m.value() or b"", None)
        except DecodeError:
            continue  # the streams reject it with its reason
        if isinstance(rec, ExperienceGroup):
            answers.extend(answers_of(rec))
    return audit(answers, decisions)
