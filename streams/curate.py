"""What a closed group becomes: rejections and curated experiences (advantage, priority, lane) + promotions.

Pure: the same samples, latest version and pass rates give the same outputs, which is what lets a
replayed group be recognised and deduplicated after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rftbus.streams.advantages import MeanBaseline, make_estimator
from rftbus.streams.advantages.grpo import group_std
from rftbus.streams.config import StreamsConfig
from rftbus.streams.groups import Sample
from rftbus.streams.priority import PassRates, difficulty_bonus, priorities


@dataclass(slots=True)
class Reject:
    sample: Sample
    reason: str
    detail: str
    stage: str = "filter"


@dataclass(slots=True)
class Outcome:
    rejects: list[Reject] = field(default_factory=list)
    curated: list[Sample] = field(default_factory=list)  # exp has advantage, priority, metadata set
    priority_lane: bool = False
    promoted: Sample | None = None
    group_priority: float = 0.0


def curate(samples: list[Sample], *, latest: int, max_staleness: int, cfg: StreamsConfig,
           pass_rates: PassRates, complete: bool = True) -> Outcome:
    """Decide a group. `complete` is False for a timed-out group that streams.incomplete_policy completes."""
    out = Outcome()
    samples = sorted(samples, key=lambda s: s.exp.sample_index)
    live: list[Sample] = []
    for s in samples:
        e = s.exp
        if s.dropped is not None:
            out.rejects.append(Reject(s, *s.dropped))
        elif e.model_version < latest - max_staleness:
            out.rejects.append(Reject(s, "stale", f"model_version {e.model_version} < latest {latest} "
                                                  f"- max_staleness {max_staleness}"))
        else:
            live.append(s)
    if not live:
        return out
    rewards = [float(s.exp.reward) for s in live]
    task_id = live[0].exp.task_id
    prior = pass_rates.get(task_id)
    if live[0].exp.group_size == 1 and complete:
        advantages = MeanBaseline().advantages(rewards, prior)
    elif len(live) < 2 or (cfg.drop_zero_variance and group_std(rewards) <= cfg.zero_variance_eps):
        why = "one sample left" if len(live) < 2 else f"all rewards {rewards[0]:g}"
        out.rejects.extend(Reject(s, "zero_variance", f"group {s.exp.group_id}: {why}") for s in live)
        pass_rates.update(task_id, sum(rewards) / len(rewards))
        return out
    else:
        advantages = make_estimator(cfg.advantage, cfg.advantage_eps).advantages(rewards)
    pass_rates.update(task_id, sum(rewards) / len(rewards))
    bonus = difficulty_bonus(prior, cfg.difficulty_weight)
    prios = priorities(advantages, [s.exp.model_version for s in live], latest, cfg.recency_decay, bonus)
    out.group_priority = sum(prios) / len(prios)
    out.priority_lane = out.group_priority >= cfg.priority_threshold
    lane = "priority" if out.priority_lane else "normal"
    for s, a, p in zip(live, advantages, prios):
        s.exp.advantage = a
        s.exp.priority = p
        s.exp.metadata = {**s.exp.metadata, "group_survivors": str(len(live)), "lane": lane,
                          **({} if complete else {"incomplete_group": "1"})}
        out.curated.append(s)
    if cfg.promote_expert:
        best = max(live, key=lambda s: s.exp.reward)
        if best.exp.reward >= cfg.expert_min_reward:
            out.promoted = best
    return out
