"""The simulated graders and the live-reward series: logic only (the real run is in tests/system/test_live.py)."""

from __future__ import annotations

import random

from rftbus.ground.config.simulate import GradersConfig
from rftbus.apps.simulate import live_reward
from rftbus.apps.simulate.graders import Answer, delay, plan, rating_of

import pytest


def _answers(*scores: float) -> list[Answer]:
    return [Answer(f"e{i}", str(i), s, s == 1.0) for i, s in enumerate(scores)]


def test_graders_are_honest_late_and_partial():
    cfg = GradersConfig(delay_median_s=10, delay_sigma=1.0, delay_min_s=5, delay_max_s=60, ungraded_share=0.1,
                        correction_share=0.2, duplicate_share=0.0, flip_rate=0.0, kinds={"thumbs": 1.0})
    rng = random.Random(1)
    kinds: dict[str, int] = {}
    ungraded = 0
    for _ in range(2000):
        right, wrong = _answers(1.0, 0.25)
        for a in (right, wrong):
            posts, u = plan(cfg, [a], "42", "40+2=", rng)
            ungraded += u
            for p in posts:
                assert 5 <= p.delay_s <= 60
                kinds[p.kind] = kinds.get(p.kind, 0) + 1
                if p.kind == "correction":
                    assert a is wrong and p.body["correction"] == "42" and p.body["prompt"] == "40+2="
                else:  # a thumb says what the score says (flip_rate 0)
                    assert p.body["thumbs"] == ("up" if a is right else "down")
    assert 0.08 < ungraded / 4000 < 0.12
    assert 0.15 < kinds["correction"] / (2000 * 0.9) < 0.25  # ~20 % of the graded wrong answers


def test_preferences_duplicates_flips_and_ids():
    cfg = GradersConfig(preference_share=1.0, duplicate_share=1.0, ungraded_share=0.0, flip_rate=1.0,
                        correction_share=0.0, kinds={"thumbs": 1.0})
    rng = random.Random(2)
    posts, _ = plan(cfg, _answers(0.2, 0.9), "x", None, rng)
    assert [p.kind for p in posts] == ["preference"]
    assert posts[0].body["preferred_id"] == "e1" and posts[0].body["rejected_id"] == "e0"
    posts, _ = plan(cfg, _answers(0.9), "x", None, rng)
    assert [p.kind for p in posts] == ["thumbs", "duplicate"]
    assert posts[0].body["thumbs"] == "down"  # flipped
    assert posts[1].delay_s > posts[0].delay_s and posts[1].body["feedback_id"] != posts[0].body["feedback_id"]
    # equal scores cannot be a preference: each is scored; no prompt, so no correction either
    posts, _ = plan(cfg.model_copy(update={"correction_share": 1.0}), _answers(0.0, 0.0), "x", None, rng)
    assert {p.kind for p in posts} == {"thumbs", "duplicate"}


def test_delay_has_a_tail_and_a_median():
    cfg = GradersConfig(delay_median_s=5, delay_sigma=1.2, delay_max_s=600)
    rng = random.Random(3)
    xs = sorted(delay(cfg, rng) for _ in range(5000))
    assert 4 < xs[2500] < 6 and xs[int(0.99 * 5000)] > 60  # seconds, with a tail of minutes


def test_ratings_round_halves_up_on_the_1_to_5_scale():
    # reverse's scores: 0, 1/8, 1/4, 3/8 (one to three letters of four), 1; round() gave 1, 1, 2, 3, 5
    assert [rating_of(s) for s in (0.0, 0.125, 0.25, 0.375, 0.625, 0.875, 1.0)] == [1, 2, 2, 3, 4, 5, 5]
    assert rating_of(-0.2) == 1 and rating_of(1.7) == 5
    scores = [k / 64 for k in range(65)]
    assert [rating_of(s) for s in scores] == sorted(rating_of(s) for s in scores)  # never lower for a higher score


def test_bad_grader_kinds_are_named():
    with pytest.raises(ValueError, match="kinds takes"):
        GradersConfig(kinds={"stars": 1.0})


def test_live_reward_per_minute_and_summary():
    rows = [{"t": 100 + s, "v": s // 60, "r": (0.1 if s < 60 else 0.9), "x": int(s >= 60)} for s in range(0, 150)]
    curve = live_reward.per_minute(rows, start=100)
    assert [b["answers"] for b in curve] == [60, 60, 30]
    assert curve[0]["reward"] == 0.1 and curve[1]["reward"] == 0.9 and curve[1]["exact"] == 1.0
    assert [b["whole"] for b in curve] == [True, True, False]
    s = live_reward.summary(rows, start=100, min_answers=20)
    assert (s["live_reward_initial"], s["live_reward_final"]) == (0.1, 0.9)  # the unfinished last minute is left out
    assert s["live_reward_by_version"] == [{"version": 0, "answers": 60, "reward": 0.1},
                                           {"version": 1, "answers": 60, "reward": 0.9},
                                           {"version": 2, "answers": 30, "reward": 0.9}]


def _live_group(gid: str, task: str, rewards: list[float], cls: str | None = None):
    from rftbus.ground.schemas import Source
    from rftbus.ground.schemas.view import GroupView, SampleView

    samples = [SampleView(f"{gid}-{i}", r, 0, {}, 3, 3, 3, True) for i, r in enumerate(rewards)]
    return GroupView(gid, task, Source.live, "serve", 4, samples, {"task_class": cls} if cls else {}, b"")


def test_lone_and_agreeing_live_answers_are_credited_against_their_class_baseline():
    """#20: a group of one (or two that agree) has no GRPO variance; its class's running mean decides."""
    from rftbus.ground.config.streams import StreamsConfig
    from rftbus.streams.curate import decide
    from rftbus.streams.priority import PassRates

    cfg = StreamsConfig(class_baseline_alpha=0.5)
    rates = PassRates(cfg.pass_rate_alpha)
    first = decide(_live_group("g0", "t0", [0.2], "add"), {}, latest=0, max_staleness=4, cfg=cfg, pass_rates=rates)
    assert first.advantages == {0: pytest.approx(0.2 - 0.5)}  # nothing known yet: 0.5
    assert rates.get("class:add") == pytest.approx(0.2)
    # a new task of the same class: compared with the class (0.2), not with 0.5
    d = decide(_live_group("g1", "t1", [0.6], "add"), {}, latest=0, max_staleness=4, cfg=cfg, pass_rates=rates)
    assert d.advantages == {0: pytest.approx(0.6 - 0.2)} and d.survivors == [0]
    # two choices with the same grade: not dropped as zero_variance, each against the class
    d = decide(_live_group("g2", "t2", [1.0, 1.0], "add"), {}, latest=0, max_staleness=4, cfg=cfg, pass_rates=rates)
    assert not d.drops and d.advantages == {0: pytest.approx(1.0 - 0.4), 1: pytest.approx(1.0 - 0.4)}
    # a task seen before uses its own pass rate (task_or_class)
    d = decide(_live_group("g3", "t1", [0.6], "add"), {}, latest=0, max_staleness=4, cfg=cfg, pass_rates=rates)
    assert d.advantages == {0: pytest.approx(0.0)}
    # stale live answers follow the staleness rule like any other
    d = decide(_live_group("g4", "t4", [1.0], "add"), {}, latest=9, max_staleness=4, cfg=cfg, pass_rates=rates)
    assert d.drops[0].reason == "stale" and not d.survivors


def test_pass_rates_are_bounded():
    from rftbus.streams.priority import PassRates

    rates = PassRates(0.5, max_keys=3)
    for k in "abcd":
        rates.update(k, 1.0)
    rates.update("b", 0.0)
    assert [k.split(b"\x00")[1].decode() for k in rates.order[0]] == ["c", "d", "b"] and rates.get("a") is None
    assert sorted(rates.store) == [b"0\x00b", b"0\x00c", b"0\x00d"]  # evicted from the store too
    rates.of(1).update("a", 0.25)  # another partition's rates are its own
    assert rates.of(1).get("a") == 0.25 and rates.get("a") is None and len(rates.order[0]) == 3


def test_feedback_posts_in_flight_are_bounded_and_all_arrive(tmp_path):
    """Through real httpx and a real HTTP server (uvicorn): 300 posts due at once, `posts_in_flight` 4. The
    server never sees more than 4 at a time and gets every one. Unbounded, thousands of posts queued inside
    httpx's pool, whose every change scans the whole queue, and the simulator's loop stalled (runner.py)."""
    import asyncio

    from fastapi import FastAPI

    from rftbus.apps.simulate.graders import Post
    from rftbus.apps.simulate.runner import Simulator
    from tests.conftest import make_config, uvicorn_thread
    from tests.integration.test_serve import free_port

    app, seen = FastAPI(), {"now": 0, "max": 0, "total": 0, "pool_max": 0}
    pool: list = []  # httpcore's connection pool of the simulator's client: its queue is what must stay short

    @app.post("/v1/feedback")
    async def feedback(body: dict) -> dict:
        seen["pool_max"] = max(seen["pool_max"], len(pool[0]._requests) if pool else 0)
        seen["now"] += 1
        seen["max"] = max(seen["max"], seen["now"])
        await asyncio.sleep(0.01)
        seen["now"] -= 1
        seen["total"] += 1
        return {"ok": True}

    async def main(cfg) -> Simulator:
        sim = Simulator(cfg)
        sim.http = sim.feedback_client()
        pool.append(sim.http._transport._pool)  # type: ignore[attr-defined]  # (httpx internals, test only)
        sim.pending_posts = 300
        await asyncio.gather(*(sim.post(Post(0.0, "reward", {"feedback_id": f"f{i}", "reward": 1.0}))
                               for i in range(300)))
        await sim.http.aclose()
        return sim

    with uvicorn_thread(app) as port:
        cfg = make_config(tmp_path, free_port(), **{
            "simulate.url": f"http://127.0.0.1:{port}/v1", "simulate.posts_in_flight": 4, "taskset.name": "reverse",
            "simulate.tasks": 100})
        sim = asyncio.run(main(cfg))

    assert seen["total"] == 300 and sim.counts["feedback_posted"] == 300 and sim.pending_posts == 0
    assert 1 < seen["max"] <= 4 and seen["pool_max"] <= 4, seen
