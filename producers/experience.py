"""Building the records an explorer publishes: a task's group of samples, expert demonstrations."""

from __future__ import annotations

from rftbus.models.prompt import PromptFormat
from rftbus.producers.workflows.base import Sample
from rftbus.schemas import Experience, ExperienceGroup, Source, Task


def group_of(task: Task, samples: list[Sample], version: int, explorer_id: str) -> ExperienceGroup:
    """One ExperienceGroup for a task's n samples (a fresh group_id, the Kafka key). The samples share
    the task's prompt: the workflow encodes it once, so the first sample's prompt ids are the group's."""
    return ExperienceGroup(
        task_id=task.task_id, source=Source.explorer, explorer_id=explorer_id, prompt_ids=samples[0].prompt_ids,
        prompt_text=samples[0].prompt_text, metadata={"taskset": task.taskset, "split": task.split},
        samples=[Experience(
            response_ids=s.response_ids, logprobs=s.logprobs, loss_mask=s.loss_mask, reward=s.reward,
            reward_components=s.components, model_version=version, response_text=s.response_text,
            finish_reason=s.finish_reason, generation_ms=s.generation_ms, reward_ms=s.reward_ms,
            metadata=dict(s.metadata),
        ) for s in samples])


def expert_group(task: Task, text: str, fmt: PromptFormat, producer_id: str) -> ExperienceGroup:
    """A task's demonstration (see `demonstration`), its prompt rendered as the explorers render it."""
    return demonstration(
        prompt_ids=fmt.of_task(task), prompt_text=task.prompt, text=text, fmt=fmt, task_id=task.task_id, producer_id=producer_id,
        metadata={"taskset": task.taskset, "split": task.split},
    )


def demonstration(*, prompt_ids: list[int], prompt_text: str, text: str, fmt: PromptFormat, task_id: str, producer_id: str,
                  metadata: dict[str, str], experience_id: str | None = None) -> ExperienceGroup:
    """The contract for demonstrations: a group of one (group_id = "<experience_id>:demo"), source=expert,
    logprobs 0.0, loss_mask all true, reward 1.0.

    model_version is 0: a demonstration does not come from any policy version (metadata says so).
    Shared by taskset experts and live corrections (producers/serve), so both meet the same contract.
    """
    response_ids = fmt.response(text)  # the answer's tokens and the model's end of turn
    sample = Experience(
        response_ids=response_ids, logprobs=[0.0] * len(response_ids), loss_mask=[True] * len(response_ids),
        reward=1.0, reward_components={"expert": 1.0}, model_version=0, response_text=text, finish_reason="stop")
    if experience_id:
        sample.experience_id = experience_id
    return ExperienceGroup(group_id=f"{sample.experience_id}:demo", task_id=task_id, source=Source.expert,
                           explorer_id=producer_id, prompt_ids=list(prompt_ids), prompt_text=prompt_text, samples=[sample],
                           metadata={**metadata, "policy_free": "1"})
