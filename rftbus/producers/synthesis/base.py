"""What a synthesizer is given and what it returns, and how one is named.

A synthesizer is a callable `(parent_task, outcome) -> list[candidate]`: a function in a file beside the config
(`module:function`), an entry point in the `rftbus.synthesizers` group, or a built-in (`taskset`, `llm`); a class
named so is made with the config's params. A candidate is a `Candidate` or a dict with `prompt`, `answer` and
optionally `metadata` and `messages`. A synthesizer that can also solve a prompt (`solve(prompt, n) -> list[str]`)
lets the stage check a candidate's answer by the consistency of its solutions where nothing can recompute it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from rftbus.ground.config.synthesis import SynthesisConfig, SynthesizerSpec
from rftbus.ground.errors import RftbusError
from rftbus.ground.schemas import ExperienceGroup, Source, Task


@dataclass(frozen=True)
class Outcome:
    """What the policy did on a task: one finished group's rewards, and what the stage asks for from it."""

    task_id: str
    rewards: tuple[float, ...]
    solved: int  # answers at or above synthesis.solved_at
    difficulty: str  # easier | same | harder: what the synthesizer is asked for
    children: int = 0  # tasks already written from this parent (a parent drawn again asks for different ones)

    @property
    def kind(self) -> str:
        """failed (none solved), mastered (all), or mixed."""
        return "failed" if self.solved == 0 else "mastered" if self.solved == len(self.rewards) else "mixed"

    @property
    def zero_variance(self) -> bool:
        return len(set(self.rewards)) <= 1


ASKED = {"failed": "easier", "mastered": "harder", "mixed": "same"}  # synthesis.difficulty auto


def outcome_of(g: ExperienceGroup, sc: SynthesisConfig, task_id: str) -> Outcome | None:
    """An explorer group's outcome if its task is a parent by `synthesis.parents`, else None."""
    if g.source != Source.explorer or not g.samples:
        return None
    if any(s.reward is None for s in g.samples):  # (not scored: no outcome)
        return None
    rewards = tuple(float(s.reward) for s in g.samples if s.reward is not None)
    o = Outcome(task_id=task_id, rewards=rewards, solved=sum(r >= sc.solved_at for r in rewards), difficulty="same")
    wanted = set(sc.parents)
    if not ("any" in wanted or o.kind in wanted or ("zero_variance" in wanted and o.zero_variance)):
        return None
    return replace(o, difficulty=ASKED[o.kind] if sc.difficulty == "auto" else sc.difficulty)


@dataclass
class Candidate:
    prompt: str
    answer: str
    metadata: dict[str, str] = field(default_factory=dict)
    messages: list[dict[str, str]] | None = None


Synthesizer = Callable[[Task, Outcome], list[Any]]


@runtime_checkable
class Solver(Protocol):
    def solve(self, prompt: str, n: int) -> list[str]: ...


class BadCandidate(ValueError):
    """A synthesizer returned something that is not a candidate."""


def as_candidate(obj: Any) -> Candidate:
    """A synthesizer's item as a Candidate, or BadCandidate naming what is wrong."""
    if isinstance(obj, Candidate):
        c = obj
    elif isinstance(obj, dict):
        unknown = set(obj) - {"prompt", "answer", "metadata", "messages"}
        if unknown:
            raise BadCandidate(f"unknown keys {sorted(unknown)} (a candidate has prompt, answer, metadata, messages)")
        c = Candidate(prompt=obj.get("prompt", ""), answer=obj.get("answer", ""),
                      metadata=dict(obj.get("metadata") or {}), messages=obj.get("messages"))
    else:
        raise BadCandidate(f"a {type(obj).__name__}, not a Candidate or a dict")
    if not isinstance(c.prompt, str) or not c.prompt.strip():
        raise BadCandidate("no prompt")
    if not isinstance(c.answer, str) or not c.answer.strip():
        raise BadCandidate("no answer (a synthesized task carries its reference answer)")
    c.metadata = {str(k): str(v) for k, v in c.metadata.items()}
    return c


BUILTIN = {"taskset": "rftbus.producers.synthesis.builtin:TasksetSynthesizer",
           "llm": "rftbus.producers.synthesis.llm:LLMSynthesizer"}


def make_synthesizer(spec: SynthesizerSpec, taskset: str, taskset_params: dict[str, Any]) -> Synthesizer:
    """The synthesizer `synthesis.synthesizer` names; a class is made with its params (the built-in `taskset`
    also with the run's taskset)."""
    from rftbus.ground.plugins import load_object

    obj = load_object(BUILTIN.get(spec.name, spec.name), group="rftbus.synthesizers", what="synthesizer")
    if isinstance(obj, type):
        params = dict(spec.params)
        if spec.name == "taskset":
            params.setdefault("taskset", taskset)
            params.setdefault("taskset_params", taskset_params)
        obj = obj(**params)
    elif spec.params:
        raise RftbusError(f"synthesizer {spec.name!r} is a function: it takes no params ({sorted(spec.params)})")
    if not callable(obj):
        raise RftbusError(f"synthesizer {spec.name!r} is {obj!r}: not callable as (parent_task, outcome)")
    return obj
