"""The decision rules every reader of topics.decisions applies (rftbus/ground/weights/decision_rules.py): the gate's own
moves pass, and each class of forged record from issue #63 is refused with its reason and changes nothing."""

from __future__ import annotations

import math

import pytest

from rftbus.consumers.gate.state import GateState
from rftbus.ground.config.gate import GateConfig
from rftbus.ground.schemas import GateDecision
from rftbus.ground.weights.decision_rules import DecisionBook


def book() -> DecisionBook:
    return DecisionBook("gate", frozenset({"", "hot"}), max_jump=1000)


def dec(decision: str, version: int, serving: int, candidate: int | None = None, lineage: str = "",
        serving_lineage: str = "", share: float | None = None, **kw) -> GateDecision:
    share = (0.3 if candidate is not None else 0.0) if share is None else share
    return GateDecision(decision_id=kw.pop("decision_id", f"m:{lineage}:v{version}:{decision}:{kw.pop('n', 0)}"),
                        model="m", decision=decision, version=version, serving=serving, candidate=candidate,
                        canary_share=share, gate=kw.pop("gate", "gate"), reason="r", lineage=lineage,
                        serving_lineage=serving_lineage, created_at=kw.pop("created_at", 1_000_000))


def test_the_gates_own_decisions_pass_the_rules():
    """A whole run of the real gate state: seed, canary, hold, rollback, another lineage's canary replaced by a
    newer one, promote: every decision it makes is believed by a reader's book, in order."""
    state = GateState("m", GateConfig(min_answers=2, max_looks=2, hold_every_s=1, replace_after_s=5), "gate")
    b = DecisionBook("gate", frozenset({"", "hot"}), max_jump=1000)
    made = []
    t = 1_000_000
    state.published(0)
    made += state.look(t)
    state.published(1)
    made += state.look(t)
    made += state.look(t + 2_000)  # a hold: no traffic
    state.published(3, "hot")
    state.published(4, "hot")
    made += state.look(t + 6_000)  # hot:v4 replaces v1 on canary
    for i in range(4):
        state.served(f"a{i}", 0, t + 7_000)
        state.served(f"b{i}", 4, t + 7_000, "hot")
        state.graded(f"a{i}", 1.0)
        state.graded(f"b{i}", 1.0)
    made += state.look(t + 8_000)  # promoted
    kinds = [d.decision for d in made]
    assert kinds[:2] == ["promote", "canary"] and "hold" in kinds and kinds[-1] == "promote", kinds
    assert [b.accept(d) for d in made] == [(True, "")] * len(made)
    assert b.serving == ("hot", 4) and b.candidate is None and b.refused == 0


def _seeded() -> DecisionBook:
    b = book()
    assert b.accept(dec("promote", 0, 0)) == (True, "")
    assert b.accept(dec("canary", 2, 0, 2)) == (True, "")
    return b


@pytest.mark.parametrize("forged,said", [
    (dec("canary", 5, 0, 5, gate="intruder"), "not by this run's gate"),
    (dec("teleport", 5, 0, 5), "none of"),
    (dec("canary", 5, 0, 5, lineage="stranger"), "lineage 'stranger'"),
    (dec("canary", -5, 0, -5), "negative"),
    (dec("canary", 5, 0, 5, share=math.nan), "not in [0, 1]"),
    (dec("canary", 5, 0, 5, share=math.inf), "not in [0, 1]"),
    (dec("canary", 5, 0, 5, share=-0.2), "not in [0, 1]"),
    (dec("canary", 5, 0, 5, share=1.5), "not in [0, 1]"),
    (dec("canary", 5, 0, 5, share=0.0), "a share needs a candidate"),
    (dec("promote", 1, 1, share=0.5), "a share needs a candidate"),
    (dec("canary", 5, 1, 5), "but v0 serves"),  # new sessions sent to a version that does not serve
    (dec("canary", 1, 0, 1), "not newer than v2"),  # an old version back on canary
    (dec("canary", 10**6, 0, 10**6), "max_version_jump"),
    (dec("rollback", 7, 0), "but v2 is on canary"),  # a rollback of what is not the candidate
    (dec("promote", 7, 7), "but v2 is on canary"),  # a version promoted that was never on canary
    (dec("promote", 2, 0), "a promote serves its version"),
    (dec("rollback", 2, 2), "keeps v0 serving"),
    (dec("hold", 2, 0, 3), "keeps v0 serving and v2 on canary"),
    (dec("canary", 5, 0, 5, created_at=1), "before the decision before it"),
])
def test_a_forged_decision_is_refused_with_its_reason_and_changes_nothing(forged, said):
    b = _seeded()
    before = (b.serving, b.candidate, dict(b.tried), b.refused)
    believed, why = b.accept(forged)
    assert not believed and said in why, why
    assert (b.serving, b.candidate, dict(b.tried)) == before[:3] and b.refused == before[3] + 1


def test_the_first_decision_must_promote_a_seed_and_a_repeat_is_skipped_silently():
    b = book()
    assert "the first decision promotes" in b.accept(dec("canary", 1, 0, 1))[1]
    d = dec("promote", 0, 0)
    assert b.accept(d) == (True, "") and b.accept(d) == (False, "") and b.refused == 1


def test_hundreds_of_rollbacks_apply_once():
    b = _seeded()
    results = [b.accept(dec("rollback", 2, 0, n=i)) for i in range(300)]
    assert results[0] == (True, "") and sum(ok for ok, _ in results) == 1 and b.refused == 299
    assert b.serving == ("", 0) and b.candidate is None
