"""Late feedback's pure parts: graders that hold grades back by versions, the bench's arms and verdict, the
feedback bound's rule."""

from __future__ import annotations

import random

import pytest

from rftbus.apps.bench.late_feedback import arm_config, arm_figures, verdict
from rftbus.ground.config import load_config
from rftbus.ground.config.simulate import GradersConfig
from rftbus.apps.simulate.graders import Answer, plan
from rftbus.ground.weights.staleness import bound
from tests.conftest import REPO


def answers(n: int, tag: str = "") -> list[Answer]:
    return [Answer(f"e{tag}{i}", "56", 1.0, True) for i in range(n)]


def test_a_share_of_grades_is_held_back_by_versions_and_a_duplicate_follows_its_grade():
    cfg = GradersConfig(late_share=0.5, late_versions=10, duplicate_share=0.5, ungraded_share=0.0,
                        correction_share=0.0)
    posts = []
    rng = random.Random(3)
    for k in range(400):
        posts += plan(cfg, answers(1, f"{k}-"), "56", "7 * 8 = ?", rng)[0]
    firsts = [p for p in posts if p.kind != "duplicate"]
    held = [p for p in firsts if p.versions_late]
    assert {p.versions_late for p in held} == {10}
    assert 0.4 < len(held) / len(firsts) < 0.6
    by_eid = {p.body["experience_id"]: p for p in firsts}
    dups = [p for p in posts if p.kind == "duplicate"]
    assert dups and all(p.versions_late == by_eid[p.body["experience_id"]].versions_late for p in dups)


def test_without_a_late_share_the_draws_are_as_before():
    """A config that holds nothing back draws the same grades from the same seed as before the knob existed."""
    a = plan(GradersConfig(), answers(2), "56", "p", random.Random(7))[0]
    b = plan(GradersConfig(late_share=0.0, late_versions=50), answers(2), "56", "p", random.Random(7))[0]
    assert [(p.kind, p.body, p.delay_s) for p in a] == [(p.kind, p.body, p.delay_s) for p in b]
    assert not any(p.versions_late for p in a)


def test_graded_sources_get_the_feedback_bound_and_rollouts_keep_eta():
    cfg = load_config(REPO / "configs" / "live-real-late.yaml", environ={})
    assert bound(cfg.rl, "live") == bound(cfg.rl, "human") == cfg.rl.max_feedback_staleness == 100
    assert bound(cfg.rl, "explorer") == cfg.rl.max_staleness == 4


@pytest.mark.parametrize("arm", ["on_time", "late", "dropped"])
def test_each_arm_differs_only_in_what_it_is_about(arm, tmp_path):
    base = load_config(REPO / "configs" / "live-real-late.yaml", environ={})
    cfg = arm_config(base, arm, tmp_path, minutes=3, late_share=0.5, late_versions=10, eta=4)
    assert cfg.state_dir == tmp_path / arm and cfg.run.max_minutes == 3 and not cfg.gate.enabled
    assert cfg.rl.max_staleness == 4 and cfg.streams.feedback_ttl_s >= 3600
    assert cfg.simulate.graders.late_share == (0.0 if arm == "on_time" else 0.5)
    # dropped: a grade past η is rejected stale, as before late grades trained; the others keep a bound past 10
    assert cfg.rl.max_feedback_staleness == (4 if arm == "dropped" else 100)
    assert bound(cfg.rl, "live") == (4 if arm == "dropped" else 100)


def test_the_verdict_checks_both_targets_and_the_books():
    def arm(gain, lost=0, p50=None):
        return arm_figures({"eval_reward_initial": 0.2, "eval_reward_final": 0.2 + gain, "experiences_lost": lost,
                            "duplicated": 0, "counts_reconcile": lost == 0, "trained_past_eta_p50": p50})

    v = verdict({"on_time": arm(0.4), "late": arm(0.37, p50=12.0), "dropped": arm(0.2)})
    assert v["late_keeps_0_9_of_on_time"] and v["late_beats_dropped"] and v["books_reconcile"]
    assert v["on_time_gain"] == 0.4 and v["late_versions_p50"] == 12.0
    v = verdict({"on_time": arm(0.4), "late": arm(0.3), "dropped": arm(0.35, lost=1)})
    assert not v["late_keeps_0_9_of_on_time"] and not v["late_beats_dropped"] and not v["books_reconcile"]
    assert verdict({"late": arm(0.1)})["late_beats_dropped"] is None


def test_repeats_pool_to_the_mean_gain_and_one_bad_run_spoils_the_books(tmp_path):
    from rftbus.apps.bench.arms import plot_evals
    from rftbus.apps.bench.late_feedback import pooled

    def run(gain, lost=0, p50=None):
        return arm_figures({"eval_reward_initial": 0.25, "eval_reward_final": 0.25 + gain, "experiences_lost": lost,
                            "duplicated": 0, "counts_reconcile": lost == 0, "trained_past_eta_p50": p50,
                            "eval_points": [{"seconds": 20.0, "version": 0, "reward": 0.25},
                                            {"seconds": 400.0, "version": 40, "reward": 0.25 + gain}]})

    from rftbus.apps.bench.late_feedback import eval_mean_over_time

    assert eval_mean_over_time([{"seconds": 0.0, "reward": 0.2}, {"seconds": 10.0, "reward": 0.4},
                                {"seconds": 30.0, "reward": 0.4}]) == pytest.approx((3.0 + 8.0) / 30, abs=1e-4)
    assert eval_mean_over_time([{"seconds": 5.0, "reward": 0.2}]) is None
    late = pooled([run(0.6, p50=14.0), run(0.65, p50=12.0), run(0.7, p50=20.0)])
    assert late["gain"] == pytest.approx(0.65) and late["gains"] == [0.6, 0.65, 0.7]
    assert late["trained_past_eta_p50"] == 14.0 and len(late["runs"]) == 3
    on = pooled([run(0.7), run(0.7), run(0.75)])
    v = verdict({"on_time": on, "late": late, "dropped": pooled([run(0.5), run(0.55), run(0.5)])})
    assert v["late_keeps_0_9_of_on_time"] and v["late_beats_dropped"] and v["books_reconcile"]
    assert v["late_versions_p50"] == 14.0
    v = verdict({"on_time": on, "late": late, "dropped": pooled([run(0.5), run(0.5, lost=2)])})
    assert not v["books_reconcile"]
    plot_evals({"on_time": on, "late": late}, tmp_path / "p.png", "t")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_rollouts_past_eta_train_only_up_to_their_own_bound_when_one_is_set():
    cfg = load_config(REPO / "configs" / "real-times.yaml", environ={})
    assert bound(cfg.rl, "explorer") == 1 and bound(cfg.rl, "expert") == 1  # unset: η, a rollout past it is stale
    rl = cfg.rl.model_copy(update={"max_rollout_staleness": 8})
    assert bound(rl, "explorer") == 8 and bound(rl, "expert") == 1 and bound(rl, "live") == 100
    assert bound(cfg.rl.model_copy(update={"max_rollout_staleness": 0}), "explorer") == 1  # never below η


def test_stale_rollout_arms_differ_only_in_the_rollout_bound(tmp_path):
    from rftbus.apps.bench import stale_rollouts as SR

    base = load_config(REPO / "configs" / "real-times.yaml", environ={})
    a, b = (SR.arm_config(base, arm, tmp_path, 3, 8) for arm in SR.ARMS)
    assert a.rl.max_rollout_staleness is None and b.rl.max_rollout_staleness == 8
    assert a.run.target_eval_reward is None and b.run.max_minutes == 3 and b.state_dir == tmp_path / "corrected"
    assert a.model_dump(exclude={"state_dir", "rl"}) == b.model_dump(exclude={"state_dir", "rl"})
    f = SR.arm_figures({"experiences_produced": 200, "experiences_rejected": {"stale": 10}, "eval_reward_initial": 0.25,
                        "eval_reward_final": 0.5, "rollouts_by_generation_time": [{"quartile": 1}]})
    assert f["stale_share_of_produced"] == 0.05 and f["gain"] == 0.25 and f["by_generation_time"] == [{"quartile": 1}]


def test_slow_rollouts_share_by_generation_time():
    from rftbus.apps.run.durations import by_generation_time
    from rftbus.apps.run.ledger import Ledger, RawRecord, RejRecord

    led = Ledger("raw")
    for i in range(8):  # generation 100..800 ms; the two slowest went stale, the rest trained
        led.raw[("raw", 0, i)] = RawRecord([f"e{i}a", f"e{i}b"], f"g{i}", "x", 3, 100.0 * (i + 1), "explorer")
    led.raw[("raw", 0, 9)] = RawRecord(["l0"], "gl", "serve", 3, 5000.0, "live")  # not a rollout
    led.lineage = [{"experience_ids": [f"e{i}a" for i in range(6)]}]
    led.rejections = [RejRecord("r", ["e6a", "e6b", "e7a", "e7b"], "stale", "filter", None)]
    rows = by_generation_time(led)
    assert [r["groups"] for r in rows] == [2, 2, 2, 2]
    assert [r["trained_share"] for r in rows] == [1.0, 1.0, 1.0, 0.0]
    assert [r["stale_share"] for r in rows] == [0.0, 0.0, 0.0, 1.0] and rows[3]["ms_max"] == 800.0
