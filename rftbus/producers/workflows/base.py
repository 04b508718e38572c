"""Workflows turn one Task into one group of samples: generate with the engine, score, return.

A workflow is a class with one method, `run(task, n, ctx)`; users plug their own in by dotted path
or entry point (`explorer.workflow.kind`, or per task via Task.workflow).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.config.explorer import SamplingConfig, WorkflowConfig
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.prompt import PromptFormat
from rftbus.producers.engines.base import RolloutEngine
from rftbus.ground.rewards.base import RewardSet
from rftbus.ground.schemas import Task


@dataclass
class Sample:
    """One response, ready to become an Experience (rftbus/producers/experience.build_group): a workflow's sample, a
    demonstration, or a live answer (reward None until its feedback arrives)."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    loss_mask: list[bool]
    reward: float | None
    components: dict[str, float]
    prompt_text: str = ""
    response_text: str = ""
    finish_reason: str = "stop"
    generation_ms: float = 0.0
    reward_ms: float = 0.0
    metadata: dict[str, str] = field(default_factory=dict)
    experience_id: str | None = None  # named before it is generated (serve's stream headers); None: a fresh id


@dataclass
class RolloutContext:
    engine: RolloutEngine
    tokenizer: Any
    sampling: SamplingConfig
    rewards: RewardSet
    workflow: WorkflowConfig
    prompt: PromptFormat | None = None  # the model's prompt format (models/prompt.py); default: the tokenizer's own

    def __post_init__(self) -> None:
        if self.prompt is None:
            self.prompt = PromptFormat.for_model(self.tokenizer, ModelConfig())

    @property
    def fmt(self) -> PromptFormat:
        assert self.prompt is not None  # set in __post_init__
        return self.prompt


class Workflow(ABC):
    @abstractmethod
    def run(self, task: Task, n: int, ctx: RolloutContext) -> list[Sample]:
        """Return exactly `n` samples for `task` (one GRPO group)."""

