"""Live completions as an ExperienceGroup: what the streams hold for feedback (streams/live.py).

The contract with the streams: source=live and reward=None mean "wait for a Feedback keyed by this
experience_id" (streams/join.py). One request with n choices is one group record (n samples, one
fresh group_id as the Kafka key), so a GRPO advantage applies once all n are graded; n=1 is a group
of one and gets the per-task mean baseline. loss_mask is all true: every response token was sampled.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rftbus.producers.engines.base import Completion
from rftbus.schemas import Experience, ExperienceGroup, Source
from rftbus.schemas.records import new_id



@dataclass(frozen=True)
class RecordIds:
    """A group's ids named before it is generated (a stream's headers carry them)."""

    group_id: str
    experience_ids: list[str]

    @classmethod
    def fresh(cls, n: int) -> RecordIds:
        return cls(new_id(), [new_id() for _ in range(n)])


@dataclass(slots=True)
class LivePrompt:
    ids: list[int]
    text: str
    task_id: str


def live_group(prompt: LivePrompt, completions: list[Completion], version: int, producer_id: str,
               generation_ms: float, metadata: dict[str, str], ids: RecordIds | None = None) -> ExperienceGroup:
    group = ExperienceGroup(
        task_id=prompt.task_id, source=Source.live, explorer_id=producer_id, prompt_ids=prompt.ids,
        prompt_text=prompt.text, metadata=dict(metadata),
        samples=[Experience(response_ids=c.response_ids, logprobs=c.logprobs, loss_mask=[True] * len(c.response_ids),
                            reward=None, model_version=version, response_text=c.text, finish_reason=c.finish_reason,
                            generation_ms=generation_ms, metadata=dict(c.metadata)) for c in completions])
    if ids is not None:
        group.group_id = ids.group_id
        for e, eid in zip(group.samples, ids.experience_ids, strict=True):
            e.experience_id = eid
    return group


class RecentPrompts:
    """experience_id -> the prompt it answered, for the last `size` recorded experiences (corrections)."""

    def __init__(self, size: int):
        self.size = size
        self._d: OrderedDict[str, LivePrompt] = OrderedDict()

    def add(self, experience_id: str, prompt: LivePrompt) -> None:
        if not self.size:
            return
        self._d[experience_id] = prompt
        while len(self._d) > self.size:
            self._d.popitem(last=False)

    def get(self, experience_id: str) -> LivePrompt | None:
        return self._d.get(experience_id)
