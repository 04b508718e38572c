"""The gate's audit (rftbus/consumers/gate/audit.py): pure over records, no broker."""

from __future__ import annotations

from rftbus.consumers.gate.audit import Answer, audit
from rftbus.ground.schemas import GateDecision


def dec(decision: str, version: int, at: int, lineage: str = "", serving: int = 0) -> GateDecision:
    return GateDecision(decision_id=f"m:{lineage}:v{version}:{decision}", model="m", decision=decision,
                        version=version, serving=serving, gate="g", reason="because", created_at=at, lineage=lineage)


DECISIONS = [dec("promote", 0, 100), dec("canary", 3, 200), dec("promote", 3, 400, serving=3),
             dec("canary", 3, 500, "hot", serving=3), dec("rollback", 3, 900, "hot", serving=3)]


def ans(at: int, version: int, decision: str, lineage: str = "", session: str | None = None,
        arm: str = "serving") -> Answer:
    return Answer(at, lineage, version, session, decision, arm)


def test_a_clean_log_passes_and_the_rollback_is_timed_from_its_first_canary_answer():
    answers = [ans(150, 0, "m::v0:promote", session="a"), ans(250, 3, "m::v3:canary", session="b", arm="canary"),
               ans(260, 0, "m::v0:promote", session="a"), ans(600, 3, "m:hot:v3:canary", "hot", "c", "canary"),
               ans(700, 3, "m:hot:v3:canary", "hot", "c", "canary"), ans(950, 3, "m::v3:promote", session="d")]
    got = audit(answers, DECISIONS)
    assert got["ok"] and got["unlicensed_answers"] == 0 and got["sessions_that_switched_version"] == 0
    assert got["sessions"] == 4 and got["promotes_by_lineage"] == {"": 2}
    [rb] = got["rollbacks"]
    assert rb["version"] == "hot:v3" and rb["first_canary_answer_ms"] == 600 and rb["s_after_first_canary_answer"] == 0.3
    assert rb["new_sessions_after"] == 0 and rb["last_new_session_s_after"] == 0.0
    late = audit(answers + [ans(2900, 3, "m:hot:v3:canary", "hot", "late", "canary")], DECISIONS)  # 2 s after it
    assert late["rollbacks"][0]["new_sessions_after"] == 1 and late["rollbacks"][0]["last_new_session_s_after"] == 2.0


def test_an_answer_before_its_license_a_foreign_lineage_and_a_switched_session_fail():
    answers = [ans(150, 3, "m::v3:canary"),  # v3 served before its canary decision
               ans(450, 3, "m:x:v3:canary", "x"),  # a lineage never decided about, naming an unknown decision
               ans(300, 0, "m::v0:promote", session="s"), ans(310, 3, "m::v3:canary", session="s")]
    got = audit(answers, DECISIONS)
    assert not got["ok"] and got["unlicensed_answers"] == 2 and got["sessions_that_switched_version"] == 1
    assert got["switched_examples"] == {"s": ["v0", "v3"]}
    assert any(e.startswith("x:v3") for e in got["unlicensed_examples"])
