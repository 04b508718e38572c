"""Live completions as an ExperienceGroup: what the streams hold for feedback (rftbus/streams/live.py).

The contract with the streams: source=live and reward=None mean "wait for a Feedback keyed by this
experience_id" (rftbus/streams/join.py). One request with n choices is one group record (n samples, one
fresh group_id as the Kafka key), so a GRPO advantage applies once all n are graded; n=1 is a group
of one and gets the per-task mean baseline. loss_mask is all true: every response token was sampled.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from rftbus.producers.engines.base import Completion
from rftbus.producers.experience import build_group
from rftbus.producers.workflows.base import Sample
from rftbus.ground.schemas import ExperienceGroup, Image, Source
from rftbus.ground.schemas.records import new_id


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
    images: list[Image] = field(default_factory=list)  # a VLM's: the request's image parts, recorded by reference


def live_group(prompt: LivePrompt, completions: list[Completion], version: int, producer_id: str,
               generation_ms: float, metadata: dict[str, str], ids: RecordIds | None = None) -> ExperienceGroup:
    eids: list[str | None] = list(ids.experience_ids) if ids is not None else [None] * len(completions)
    samples = [Sample(prompt_ids=prompt.ids, response_ids=c.response_ids, logprobs=c.logprobs,
                      loss_mask=[True] * len(c.response_ids), reward=None, components={}, prompt_text=prompt.text,
                      response_text=c.text, finish_reason=c.finish_reason, generation_ms=generation_ms,
                      metadata=dict(c.metadata), experience_id=eid)
               for c, eid in zip(completions, eids, strict=True)]
    return build_group(samples, source=Source.live, task_id=prompt.task_id, producer_id=producer_id, version=version,
                       metadata=metadata, group_id=ids.group_id if ids is not None else None, images=prompt.images)


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
