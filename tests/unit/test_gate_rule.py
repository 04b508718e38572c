"""The promotion gate's statistics and state (rftbus/consumers/gate/rule.py, state.py): pure logic, no broker."""

from __future__ import annotations

import random

import pytest

from rftbus.ground.config.gate import GateConfig
from rftbus.consumers.gate.rule import Arm, decide
from rftbus.consumers.gate.state import GateState, Ref

RULE = GateConfig(min_answers=30, margin=0.05, alpha=0.05, max_looks=10)


def arm(values) -> Arm:
    a = Arm()
    for v in values:
        a.add(v)
    return a


def bernoulli(p: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [1.0 if rng.random() < p else 0.0 for _ in range(n)]


def test_welford_mean_and_variance():
    a = arm([1.0, 2.0, 4.0])
    assert a.n == 3 and a.mean == pytest.approx(7 / 3) and a.var == pytest.approx(2.3333333, rel=1e-6)


def test_a_clearly_worse_candidate_is_rolled_back_with_the_statistics_written_down():
    v = decide(arm(bernoulli(0.8, 60, 1)), arm(bernoulli(0.2, 60, 2)), RULE, look=2)
    assert v.decision == "rollback", v.reason
    ev = v.evidence
    assert ev["n_serving"] == 60 and ev["n_candidate"] == 60 and ev["margin"] == 0.05
    assert ev["alpha"] == pytest.approx(0.005) and ev["z_crit"] == pytest.approx(2.5758, abs=1e-3)
    assert ev["z"] < -ev["z_crit"] and "worse than the serving version" in v.reason


def test_an_equal_candidate_is_promoted_and_a_close_one_holds():
    # an equal candidate needs the power: z = δ / se > 2.58 takes ~1,300 answers an arm at p 0.6, δ 0.05
    assert decide(arm(bernoulli(0.6, 200, 3)), arm(bernoulli(0.6, 200, 4)), RULE, look=6).decision == "hold"
    equal = [1.0] * 900 + [0.0] * 600
    assert decide(arm(equal), arm(equal), RULE, look=10).decision == "promote"
    close = decide(arm(bernoulli(0.6, 30, 5)), arm(bernoulli(0.5, 30, 6)), RULE, look=1)
    assert close.decision == "hold" and "not conclusive" in close.reason


def test_no_look_no_test_but_a_much_worse_eval_rolls_back_at_once():
    v = decide(Arm(), Arm(), RULE, look=0)
    assert v.decision == "hold" and "the first look needs 30 each" in v.reason
    v = decide(Arm(), Arm(), RULE, look=0, eval_serving=0.7, eval_candidate=0.5)
    assert v.decision == "rollback" and "held-out eval 0.500" in v.reason


def test_identical_scores_decide_exactly():
    assert decide(arm([1.0] * 30), arm([1.0] * 30), RULE, look=1).decision == "promote"
    assert decide(arm([1.0] * 30), arm([0.0] * 30), RULE, look=1).decision == "rollback"


def feed(s: GateState, version: int, rewards: list[float], at: int, tag: str) -> None:
    for i, r in enumerate(rewards):
        s.served(f"{tag}-{i}", version, at)
        s.graded(f"{tag}-{i}", r)


def test_seed_then_canary_then_promote_then_the_next_canary():
    s = GateState("m", RULE)
    assert s.look(now=500) == []  # nothing published: nothing can serve yet
    s.published(0)
    [d] = s.look(now=1000)
    assert (d.decision, d.version, d.serving, d.candidate) == ("promote", 0, 0, None)
    assert s.look(now=1001) == []  # nothing newer published
    s.published(3)
    [d] = s.look(now=2000)
    assert (d.decision, d.version, d.serving, d.candidate, d.canary_share) == ("canary", 3, 0, 3, RULE.canary_share)
    feed(s, 0, bernoulli(0.5, 29, 7), 2500, "s")
    feed(s, 3, bernoulli(0.5, 40, 8), 2500, "c")
    assert s.look(now=3000) == []  # 29 answers of v0: no look yet, and not yet hold_every_s
    feed(s, 0, [1.0] * 31, 2600, "s2")
    feed(s, 3, [1.0] * 40, 2600, "c2")
    [d] = s.look(now=4000)
    assert d.decision in ("promote", "hold") and d.evidence["look"] == 2, d.reason
    s.published(5)
    for k in range(3, 11):  # more evidence, a look each 30 answers an arm, until the looks decide
        if s.candidate != Ref("", 3):
            break
        feed(s, 0, [0.0, 1.0] * 15, 4100, f"s{k}")  # the candidate answers better: promoted at a look
        feed(s, 3, [1.0] * 30, 4100, f"c{k}")
        s.look(now=5000 + k)
    assert s.serving == Ref("", 3) and s.candidate is None
    [d] = s.look(now=9000)
    assert (d.decision, d.version, d.serving) == ("canary", 5, 3)


def test_answers_served_before_the_canary_and_other_versions_are_not_evidence():
    s = GateState("m", RULE)
    s.published(0)
    s.look(now=0)
    s.published(1)
    s.look(now=10_000)
    feed(s, 1, [0.0] * 50, 9_999, "before")  # served before the canary began
    feed(s, 7, [0.0] * 50, 10_001, "other")  # neither the serving version nor the candidate
    assert s.arms == {}
    s.graded("late", 1.0)  # a grade before its answer is read: kept, counted when the answer comes
    s.served("late", 1, 10_002)
    assert s.arms[Ref("", 1)].n == 1
    s.graded("late", 0.0)  # a second grade of the same answer does not count again
    assert s.arms[Ref("", 1)].n == 1 and s.arms[Ref("", 1)].mean == 1.0


def test_a_restart_adopts_the_decisions_and_decides_nothing_twice():
    a = GateState("m", RULE)
    a.published(0)
    log = a.look(now=0)
    a.published(2)
    log += a.look(now=1000)
    feed(a, 0, [1.0] * 30, 1500, "s")
    feed(a, 2, [0.0] * 30, 1500, "c")
    log += a.look(now=2000)
    assert [d.decision for d in log] == ["promote", "canary", "rollback"]
    b = GateState("m", RULE)  # killed and restarted: reads its decisions back, then the evidence again
    for d in log:
        b.adopt(d)
    b.published(2)
    feed(b, 0, [1.0] * 30, 1500, "s")
    feed(b, 2, [0.0] * 30, 1500, "c")
    assert b.look(now=3000) == [] and (b.serving, b.candidate, b.rolled_back) == (Ref("", 0), None, {Ref("", 2)})
    b.published(4)
    [d] = b.look(now=4000)
    assert (d.decision, d.version) == ("canary", 4)


def test_no_traffic_holds_once_and_a_long_hold_is_replaced_by_the_newest():
    s = GateState("m", RULE)
    s.published(0)
    s.look(now=0)
    s.published(1)
    s.look(now=1000)
    assert s.look(now=1000 + 29_000) == []
    [d] = s.look(now=1000 + 30_000)
    assert d.decision == "hold" and d.evidence["n_candidate"] == 0
    assert s.look(now=1000 + 60_000) == []  # said once
    s.published(4)
    [d] = s.look(now=1000 + 300_000)
    assert (d.decision, d.version, d.candidate) == ("canary", 4, 4) and "replaces v1" in d.reason


def feed_lineage(s: GateState, ref: Ref, rewards: list[float], at: int, tag: str) -> None:
    for i, r in enumerate(rewards):
        s.served(f"{tag}-{i}", ref.version, at, ref.lineage)
        s.graded(f"{tag}-{i}", r)


def test_two_trainers_take_turns_the_bad_one_is_rolled_back_and_the_good_one_promoted():
    """Two lineages (run.trainers): their versions are told apart by lineage though their numbers collide; the
    lineage whose last canary is oldest goes next, so neither starves the other."""
    s = GateState("m", RULE)
    log: list = []

    def look(now: int) -> list:
        made = s.look(now=now)
        log.extend(made)
        return made

    s.published(0)
    s.published(0, "hot")  # the second trainer's seed is never a candidate
    [d] = look(0)
    assert (d.decision, d.version, d.lineage) == ("promote", 0, "")
    s.published(3)
    s.published(3, "hot")
    [d] = look(1000)  # a tie (neither tried yet): the first lineage
    assert (d.decision, d.lineage, d.version, d.candidate) == ("canary", "", 3, 3)
    feed_lineage(s, Ref("", 0), [0.0, 1.0] * 15, 1500, "s")
    feed_lineage(s, Ref("hot", 3), [0.0] * 30, 1500, "wrong-lineage")  # not the candidate: no evidence
    feed_lineage(s, Ref("", 3), [1.0] * 30, 1500, "c")
    [d] = look(2000)
    assert (d.decision, d.version, d.serving, d.serving_lineage) == ("promote", 3, 3, "")
    [d] = look(2001)  # the other lineage's turn
    assert (d.decision, d.lineage, d.version, d.serving, d.serving_lineage) == ("canary", "hot", 3, 3, "")
    assert d.decision_id == "m:hot:v3:canary" and "hot:v3 serves" in d.reason
    s.published(5)
    feed_lineage(s, Ref("", 3), [1.0, 0.0, 1.0] * 10, 2500, "s2")
    feed_lineage(s, Ref("hot", 3), [0.0] * 30, 2500, "h")
    [d] = look(3000)
    assert (d.decision, d.lineage, d.version, d.serving, d.serving_lineage) == ("rollback", "hot", 3, 3, "")
    assert Ref("hot", 3) in s.rolled_back and s.serving == Ref("", 3)
    [d] = look(3001)  # the first lineage's next version
    assert (d.decision, d.lineage, d.version) == ("canary", "", 5)
    s.published(6, "hot")
    feed_lineage(s, Ref("", 3), [0.0] * 30, 3500, "s3")
    feed_lineage(s, Ref("", 5), [0.0] * 30, 3500, "c5")
    [d] = look(4000)
    assert (d.decision, d.version) == ("promote", 5)
    [d] = look(4001)  # "hot" waited longest: its newest
    assert (d.decision, d.lineage, d.version) == ("canary", "hot", 6)
    feed_lineage(s, Ref("", 5), [0.0] * 30, 4500, "s4")
    feed_lineage(s, Ref("hot", 6), [1.0] * 30, 4500, "h6")
    [d] = look(5000)  # a better second trainer ends up serving: its lineage is on the record
    assert (d.decision, d.lineage, d.serving, d.serving_lineage) == ("promote", "hot", 6, "hot")
    b = GateState("m", RULE)  # restarted: the decisions read back leave the same state
    for x in log:
        b.adopt(x)
    assert (b.serving, b.candidate, b.rolled_back, b.tried) == (s.serving, None, {Ref("hot", 3)}, {"": 5, "hot": 6})
    assert len(log) == 9 and len({x.decision_id for x in log}) == 9


def test_a_hold_between_looks_says_so():
    v = decide(arm([1.0] * 40), arm([1.0, 0.0] * 25), RULE, look=0)
    assert v.decision == "hold" and "no look due (one at each multiple of 30 an arm, 10 at most)" in v.reason
