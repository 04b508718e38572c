"""Building the records an explorer publishes: Experiences from samples, expert demonstrations."""

from __future__ import annotations

from rftbus.producers.workflows.base import Sample, encode_prompt
from rftbus.schemas import Experience, Source, Task, new_id


def experiences(task: Task, samples: list[Sample], version: int, explorer_id: str) -> list[Experience]:
    """One Experience per sample, all sharing a fresh group_id (the Kafka key)."""
    group_id = new_id()
    n = len(samples)
    return [Experience(
        group_id=group_id, task_id=task.task_id, sample_index=i, group_size=n,
        prompt_ids=s.prompt_ids, response_ids=s.response_ids, logprobs=s.logprobs, loss_mask=s.loss_mask,
        reward=s.reward, reward_components=s.components, model_version=version, source=Source.explorer,
        explorer_id=explorer_id, prompt_text=s.prompt_text, response_text=s.response_text,
        finish_reason=s.finish_reason, generation_ms=s.generation_ms, reward_ms=s.reward_ms,
        metadata={**s.metadata, "taskset": task.taskset, "split": task.split},
    ) for i, s in enumerate(samples)]


def expert_experience(task: Task, text: str, tokenizer, producer_id: str, chat_template: bool = False) -> Experience:
    """A task's demonstration (see `demonstration`); all demonstrations of a task share one key."""
    return demonstration(
        prompt_ids=encode_prompt(tokenizer, task.prompt, chat_template), prompt_text=task.prompt, text=text,
        tokenizer=tokenizer, task_id=task.task_id, group_id=f"{task.task_id}:expert", producer_id=producer_id,
        metadata={"taskset": task.taskset, "split": task.split},
    )


def demonstration(*, prompt_ids: list[int], prompt_text: str, text: str, tokenizer, task_id: str, group_id: str,
                  producer_id: str, metadata: dict[str, str], experience_id: str | None = None) -> Experience:
    """The contract for demonstrations: source=expert, logprobs 0.0, loss_mask all true, reward 1.0.

    model_version is 0: a demonstration does not come from any policy version (metadata says so).
    Shared by taskset experts and live corrections (producers/serve), so both meet the same contract.
    """
    response_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is not None:
        response_ids.append(tokenizer.eos_token_id)
    return Experience(
        **({"experience_id": experience_id} if experience_id else {}),
        group_id=group_id, task_id=task_id, sample_index=0, group_size=1,
        prompt_ids=list(prompt_ids), response_ids=response_ids, logprobs=[0.0] * len(response_ids),
        loss_mask=[True] * len(response_ids), reward=1.0, reward_components={"expert": 1.0}, model_version=0,
        source=Source.expert, explorer_id=producer_id, prompt_text=prompt_text, response_text=text,
        finish_reason="stop", metadata={**metadata, "policy_free": "1"},
    )
