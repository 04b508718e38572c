"""What a group becomes: which samples are dropped (and why), advantages for the survivors, priority,
lane and the sample promoted to a demonstration.

Pure: the same group, latest version and pass rates give the same decision, which is what lets a
replayed group be recognised and its missing outputs written again after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rftbus.ground.schemas import Source
from rftbus.streams.advantages import MeanBaseline, make_estimator
from rftbus.streams.advantages.grpo import group_std
from rftbus.ground.config.streams import StreamsConfig
from rftbus.streams.priority import Rates, difficulty_bonus, priorities
from rftbus.ground.schemas.verify import Drop
from rftbus.ground.schemas.view import GroupView
from rftbus.ground.weights.staleness import is_stale, stale_detail

GRADED = (Source.live, Source.human, Source.trace)  # rewards from feedback: a lone answer still has a baseline


def class_key(g: GroupView) -> str:
    """The prompt class a live answer is compared with: the request's `task_class` metadata, else its
    source (all live traffic is one class)."""
    return "class:" + (g.metadata.get("task_class") or g.source.value)


def singleton_baseline(g: GroupView, prior: float | None, pass_rates: Rates, cfg: StreamsConfig) -> float | None:
    """What a lone answer's reward is compared with (`streams.singleton_baseline`): its task's pass rate
    once the task has been seen (`task`), its class's running mean (`class`), or the task's when known and
    the class's otherwise (`task_or_class`, the default: live prompts rarely repeat). None: 0.5."""
    how = cfg.singleton_baseline
    if how == "task" or (how == "task_or_class" and prior is not None):
        return prior
    return pass_rates.get(class_key(g))


@dataclass(slots=True)
class Decision:
    drops: dict[int, Drop]  # sample index -> why it is dropped (every stage)
    survivors: list[int] = field(default_factory=list)
    advantages: dict[int, float] = field(default_factory=dict)
    priority: float = 0.0
    priority_lane: bool = False
    promoted: int | None = None  # sample index copied to the expert lane


def decide(g: GroupView, drops: dict[int, Drop], *, latest: int, max_staleness: int, cfg: StreamsConfig,
           pass_rates: Rates) -> Decision:
    """``drops`` are the samples verify already dropped; the rest are decided here."""
    out = Decision(dict(drops))
    live: list[int] = []
    for i, s in enumerate(g.samples):
        if i in out.drops:
            continue
        if is_stale(s.model_version, latest, max_staleness):
            out.drops[i] = Drop("stale", stale_detail(s.model_version, latest, max_staleness), "filter")
        else:
            live.append(i)
    if not live:
        return out
    rewards = [float(g.samples[i].reward) for i in live]  # type: ignore[arg-type]  # None was dropped
    prior = pass_rates.get(g.task_id)
    mean = sum(rewards) / len(rewards)
    pass_rates.update(g.task_id, mean)
    flat = len(live) < 2 or group_std(rewards) <= cfg.zero_variance_eps
    if (len(live) == 1 and g.size == 1) or (flat and g.source in GRADED):
        # a graded answer alone, or graded answers that agree (two choices both right): the group says
        # nothing, the baseline of the task or its class still does
        advantages = MeanBaseline().advantages(rewards, singleton_baseline(g, prior, pass_rates, cfg))
    elif len(live) < 2 or (cfg.drop_zero_variance and flat):
        why = "one sample left" if len(live) < 2 else f"all rewards {rewards[0]:g}"
        for i in live:
            out.drops[i] = Drop("zero_variance", f"group {g.group_id}: {why}", "filter")
        return out
    else:
        advantages = make_estimator(cfg.advantage, cfg.advantage_eps).advantages(rewards)
    if g.source in GRADED:
        pass_rates.update(class_key(g), mean, cfg.class_baseline_alpha)
    bonus = difficulty_bonus(prior, cfg.difficulty_weight)
    prios = priorities(advantages, [g.samples[i].model_version for i in live], latest, cfg.recency_decay, bonus)
    out.survivors = live
    out.advantages = dict(zip(live, advantages))
    out.priority = sum(prios) / len(prios)
    out.priority_lane = out.priority >= cfg.priority_threshold
    if cfg.promote_expert:
        best = max(live, key=lambda i: rewards[live.index(i)])
        if rewards[live.index(best)] >= cfg.expert_min_reward:
            out.promoted = best
    return out
