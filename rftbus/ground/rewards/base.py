"""Reward functions and how they combine.

Two forms. The simple one, `RewardFn`, maps (task, response text) to named components in which "reward" is
its scalar. `GroupRewardFn` sees a whole group at once, `score_group(task, responses) -> [components, ...]`,
for judges that rank the n answers of a prompt in one call (ART's RULER pattern) or batch their work; a
response carries its text, token ids and finish reason, the task its messages. Either may be `async`: the
coroutine runs on one shared event loop (aio.py), so a judge's concurrent calls overlap. The explorer combines
the terms with weights: reward = sum(weight_i * reward_i), every component recorded as `<name>` /
`<name>.<component>` in Experience.reward_components.
"""

from __future__ import annotations

import inspect
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.rewards.aio import resolve
from rftbus.ground.schemas import Task
from rftbus.ground.profile import phase

Components = dict[str, float]


@dataclass(frozen=True)
class Response:
    """One sampled answer, as a group reward sees it."""

    text: str
    token_ids: Sequence[int] = field(default_factory=tuple)
    finish_reason: str = ""


class RewardFn(ABC):
    """One reward term scored an answer at a time. Subclasses take their config `params` as keyword
    arguments; `__call__` may be `async def`."""

    name: str = "reward"

    @abstractmethod
    def __call__(self, task: Task, response: str) -> Components | Awaitable[Components]:
        """Components, including "reward" (the scalar this function contributes)."""


class GroupRewardFn(ABC):
    """One reward term scored a group at a time; `score_group` may be `async def`."""

    name: str = "group_reward"

    @abstractmethod
    def score_group(self, task: Task, responses: list[Response]) -> list[Components] | Awaitable[list[Components]]:
        """One components dict (with "reward") per response, in order."""


@dataclass
class Scored:
    reward: float
    components: dict[str, float]
    reward_ms: float


async def _each(fn, task: Task, responses: list[Response]) -> list[Components]:
    import asyncio

    outs = [fn(task, r.text) for r in responses]
    return list(await asyncio.gather(*outs)) if outs and inspect.isawaitable(outs[0]) else outs


CONTRACT = ("a reward returns a number, or a dict with a numeric 'reward' (and any other numeric components), per "
            "answer; a group reward (score_group, or TRL's f(prompts, completions, **columns)) a list of those, one per "
            "answer (docs/REWARDS.md)")


def trl_style(fn: Any) -> bool:
    """TRL's reward signature: f(prompts, completions, **kwargs) -> list[float], called once per group."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return params[:2] == ["prompts", "completions"]


def _trl_call(fn: Any, task: Task, responses: list[Response], images: Any = None) -> Any:
    """The group as TRL hands it over: prompts and completions, and the task's columns (answer, task_id and its
    metadata) as lists with one entry per completion; a task's images as `images` (PIL images, read and hash-checked
    by `images`, the run's reader: rftbus/ground/images/), as TRL gives a vision dataset's to a reward."""
    n = len(responses)
    columns: dict[str, list] = {"answer": [task.answer] * n, "task_id": [task.task_id] * n,
                                "completion_ids": [list(r.token_ids) for r in responses]}
    if task.images and images is not None:
        shown = images(task.images)
        columns["images"] = [shown] * n
    for k, v in task.columns().items():  # every other column of the data row, with its type
        columns.setdefault(k, [v] * n)
    return fn([task.prompt] * n, [r.text for r in responses], **columns)


def components_of(name: str, out: Any) -> Components:
    """One answer's score as components: a number is its reward; a dict must hold a numeric 'reward'. Every value
    must be finite: a NaN would pass here and make the streams drop the group far from its cause."""
    comps = _components(name, out)
    for k, v in comps.items():
        if not math.isfinite(v):
            part = "" if k == "reward" else f" (component {k!r})"
            raise ValueError(f"reward {name!r} returned {v}{part}, not a finite number: {CONTRACT}")
    return comps


def _components(name: str, out: Any) -> Components:
    if isinstance(out, bool) or isinstance(out, (int, float)):
        return {"reward": float(out)}
    if isinstance(out, dict):
        if "reward" not in out:
            raise ValueError(f"reward {name!r} returned a dict without 'reward' ({sorted(out)[:5]}): {CONTRACT}")
        try:
            return {str(k): float(v) for k, v in out.items()}
        except (TypeError, ValueError):
            raise ValueError(f"reward {name!r} returned a non-numeric component in {out!r}: {CONTRACT}") from None
    if hasattr(out, "item") and callable(out.item):  # a numpy or torch scalar
        return {"reward": float(out.item())}
    raise ValueError(f"reward {name!r} returned {type(out).__name__} {out!r:.80}: {CONTRACT}")


def _group_of(fn: Any, task: Task, responses: list[Response], name: str = "", images: Any = None) -> list[Components]:
    name = name or str(getattr(fn, "name", None) or getattr(fn, "__name__", repr(fn)))
    if hasattr(fn, "score_group"):
        out = resolve(fn.score_group(task, responses))
    elif trl_style(fn):
        out = resolve(_trl_call(fn, task, responses, images))
    elif inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        out = resolve(_each(fn, task, responses))  # an async per-answer reward: the group's calls overlap
    else:
        out = [fn(task, r.text) for r in responses]
    if isinstance(out, tuple):
        out = list(out)
    if not isinstance(out, list) or len(out) != len(responses):
        got = f"{len(out)} scores" if isinstance(out, list) else f"{type(out).__name__} {out!r:.80}"
        raise ValueError(f"reward {name!r} returned {got} for {len(responses)} answers: {CONTRACT}")
    return [components_of(name, o) for o in out]


class RewardSet:
    """Weighted combination of reward functions (the explorer's scorer)."""

    def __init__(self, terms: list[tuple[str, float, Any]], images: Any = None):
        """`images`: the run's image reader (Image records -> PIL images, verified), for rewards that look at a
        task's images (a TRL-style reward's `images` column); None in a text-only run."""
        if not terms:
            raise ValueError("at least one reward function is needed")
        self.terms = terms
        self.images = images

    def score_group(self, task: Task, responses: Sequence[Response | str]) -> list[Scored]:
        """Every response of a group scored by every term (a group term once for the whole group)."""
        rs = [r if isinstance(r, Response) else Response(r) for r in responses]
        t0 = time.perf_counter()
        totals, comps = [0.0] * len(rs), [dict[str, float]() for _ in rs]
        with phase("reward"):
            for name, weight, fn in self.terms:
                for k, out in enumerate(_group_of(fn, task, rs, name, self.images)):
                    value = out["reward"]
                    totals[k] += weight * value
                    comps[k][name] = value
                    comps[k].update({f"{name}.{c}": v for c, v in out.items() if c != "reward"})
        ms = (time.perf_counter() - t0) * 1000 / max(1, len(rs))
        return [Scored(t, c, ms) for t, c in zip(totals, comps)]

    def score(self, task: Task, response: str) -> Scored:
        return self.score_group(task, [response])[0]
