"""What simulated graders say about served answers, and when: pure, so it is tested on its own.

The taskset's scorer decides the grade (honest feedback); the config makes it late (log-normal delay),
late by versions (a share held back until the model has moved on `late_versions`), partial (a share never
graded), noisy (flipped thumbs, 1-5 ratings), repeated (a second grader) and
richer than a score (corrections with the reference answer, preferences between two choices).
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass, field

from rftbus.ground.config.simulate import GradersConfig


@dataclass(slots=True)
class Answer:
    experience_id: str
    text: str
    score: float  # the taskset's reward of this answer
    exact: bool


@dataclass(slots=True)
class Post:
    """One POST /v1/feedback, `delay_s` after the answer. `body` carries a feedback_id, so a retry is one feedback.
    `versions_late`: held back further, until the published version is this many past the answering one."""
    delay_s: float
    kind: str
    body: dict = field(default_factory=dict)
    versions_late: int = 0


def delay(cfg: GradersConfig, rng: random.Random) -> float:
    d = cfg.delay_median_s * math.exp(rng.gauss(0.0, cfg.delay_sigma)) if cfg.delay_sigma else cfg.delay_median_s
    return min(cfg.delay_max_s, max(cfg.delay_min_s, d))


def rating_of(score: float) -> int:
    """A 0..1 score on the 1-5 scale, halves rounded up. (Python's round() rounds halves to even: a score of
    0.125, one letter of four right, was rated 1 like nothing right, and 0.375 was rated 3.)"""
    return 1 + math.floor(4 * min(max(score, 0.0), 1.0) + 0.5)


def _score(cfg: GradersConfig, a: Answer, rng: random.Random) -> tuple[str, dict]:
    kinds = list(cfg.kinds)
    kind = rng.choices(kinds, weights=[cfg.kinds[k] for k in kinds])[0]
    if kind == "reward":
        return kind, {"reward": round(a.score, 4)}
    if kind == "rating":
        return kind, {"rating": rating_of(a.score)}
    up = (a.score >= 0.5) != (rng.random() < cfg.flip_rate)
    return kind, {"thumbs": "up" if up else "down"}


def plan(cfg: GradersConfig, answers: list[Answer], reference: str, prompt: str | None,
         rng: random.Random) -> tuple[list[Post], int]:
    """The feedback posts for the answers of one request, and how many answers are left ungraded.
    `prompt`: sent with a correction (the proxy may have forgotten it after a restart); None = no
    correction possible (a multi-turn prompt the proxy formatted itself)."""
    posts: list[Post] = []
    ungraded = 0
    todo = list(answers)
    if len(answers) == 2 and answers[0].score != answers[1].score and rng.random() < cfg.preference_share:
        best, worst = sorted(answers, key=lambda a: -a.score)
        posts.append(Post(delay(cfg, rng), "preference", {"preferred_id": best.experience_id,
                                                          "rejected_id": worst.experience_id}))
        todo = []
    for a in todo:
        if rng.random() < cfg.ungraded_share:
            ungraded += 1
            continue
        if not a.exact and prompt is not None and rng.random() < cfg.correction_share:
            kind, body = "correction", {"correction": reference, "prompt": prompt}
        else:
            kind, body = _score(cfg, a, rng)
        posts.append(Post(delay(cfg, rng), kind, {"experience_id": a.experience_id, **body}))
        if rng.random() < cfg.duplicate_share:  # another grader, later, says what the score says
            kind2, body2 = _score(cfg, a, rng)
            posts.append(Post(posts[-1].delay_s + delay(cfg, rng), "duplicate",
                              {"experience_id": a.experience_id, **body2}))
    if cfg.late_share:  # (drawn only when asked for: other configs keep their sequence of draws)
        held: dict[str, int] = {}
        for p in posts:  # a second grader's duplicate comes after the grade it repeats, held or not
            eid = p.body.get("experience_id") or p.body.get("preferred_id", "")
            if p.kind == "duplicate":
                p.versions_late = held.get(eid, 0)
            elif rng.random() < cfg.late_share:
                p.versions_late = held[eid] = cfg.late_versions
    for i, p in enumerate(posts):
        p.body["feedback_id"] = uuid.UUID(int=rng.getrandbits(128)).hex
        p.body["annotator"] = f"sim-grader-{i % 2}" if p.kind != "duplicate" else "sim-grader-second"
    return posts, ungraded
