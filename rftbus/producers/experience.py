"""The one builder of the record every producer publishes, an ExperienceGroup: an explorer's group of samples,
a demonstration (taskset expert or live correction) and serve's live answers all pass through `build_group`,
so the record has one shape however it was made."""

from __future__ import annotations

from rftbus.ground.models.prompt import PromptFormat
from rftbus.producers.workflows.base import Sample
from rftbus.ground.schemas import Experience, ExperienceGroup, Feedback, Image, Source, Task
from rftbus.ground.schemas.records import new_id


def build_group(samples: list[Sample], *, source: Source, task_id: str, producer_id: str, version: int,
                metadata: dict[str, str], group_id: str | None = None, images: list[Image] | None = None) -> ExperienceGroup:
    """One ExperienceGroup for a prompt's samples (`group_id`, the Kafka key: fresh unless named). The samples
    share the prompt: the first sample's prompt ids and text are the group's, and `images` the images it shows
    (the task's records, so the trainer reads the bytes the explorer generated from)."""
    group = ExperienceGroup(
        task_id=task_id, source=source, explorer_id=producer_id, prompt_ids=list(samples[0].prompt_ids),
        prompt_text=samples[0].prompt_text, metadata=dict(metadata), images=list(images or []),
        samples=[Experience(
            response_ids=s.response_ids, logprobs=s.logprobs, loss_mask=s.loss_mask, reward=s.reward,
            reward_components=dict(s.components), model_version=version, response_text=s.response_text,
            finish_reason=s.finish_reason, generation_ms=s.generation_ms, reward_ms=s.reward_ms,
            metadata=dict(s.metadata),
        ) for s in samples])
    if group_id is not None:
        group.group_id = group_id
    for s, e in zip(samples, group.samples, strict=True):
        if s.experience_id is not None:
            e.experience_id = s.experience_id
    return group


def group_of(task: Task, samples: list[Sample], version: int, explorer_id: str) -> ExperienceGroup:
    """An explorer's group: a task's n samples (the workflow encodes the prompt once)."""
    return build_group(samples, source=Source.explorer, task_id=task.task_id, producer_id=explorer_id,
                       version=version, metadata={"taskset": task.taskset, "split": task.split}, images=task.images)


def expert_group(task: Task, text: str, fmt: PromptFormat, producer_id: str) -> ExperienceGroup:
    """A task's demonstration (see `demonstration`), its prompt rendered as the explorers render it."""
    return demonstration(
        prompt_ids=fmt.of_task(task), prompt_text=task.prompt, text=text, fmt=fmt, task_id=task.task_id,
        producer_id=producer_id, metadata={"taskset": task.taskset, "split": task.split}, images=task.images,
    )


def demonstration(*, prompt_ids: list[int], prompt_text: str, text: str, fmt: PromptFormat, task_id: str,
                  producer_id: str, metadata: dict[str, str], experience_id: str | None = None,
                  images: list[Image] | None = None) -> ExperienceGroup:
    """The contract for demonstrations: a group of one (group_id = "<experience_id>:demo"), source=expert,
    logprobs 0.0, loss_mask all true, reward 1.0.

    model_version is 0: a demonstration does not come from any policy version (metadata says so).
    Shared by taskset experts and live corrections (rftbus/producers/serve), so both meet the same contract.
    """
    response_ids = fmt.response(text)  # the answer's tokens and the model's end of turn
    eid = experience_id or new_id()
    sample = Sample(prompt_ids=prompt_ids, response_ids=response_ids, logprobs=[0.0] * len(response_ids),
                    loss_mask=[True] * len(response_ids), reward=1.0, components={"expert": 1.0},
                    prompt_text=prompt_text, response_text=text, finish_reason="stop", experience_id=eid)
    return build_group([sample], source=Source.expert, task_id=task_id, producer_id=producer_id, version=0,
                       metadata={**metadata, "policy_free": "1"}, group_id=f"{eid}:demo", images=images)


def correction_group(fb: Feedback, prompt_ids: list[int], prompt_text: str, task_id: str, fmt: PromptFormat,
                     producer_id: str) -> ExperienceGroup:
    """The corrected response as a demonstration. Its id derives from the feedback id, so a retried
    feedback (same feedback_id) yields the same expert record, not a second one."""
    meta = {"corrected_from": fb.experience_id, "feedback_id": fb.feedback_id, "origin": "correction"}
    if fb.annotator:
        meta["annotator"] = fb.annotator
    return demonstration(prompt_ids=prompt_ids, prompt_text=prompt_text, text=fb.correction or "",
                         fmt=fmt, task_id=task_id, producer_id=producer_id, metadata=meta,
                         experience_id=f"{fb.feedback_id}:correction")
