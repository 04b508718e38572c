"""The `synthesis:` config section: new tasks written from the log's outcomes (pydantic only: no heavy imports)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Outcome = Literal["failed", "mastered", "mixed", "zero_variance", "any"]


class SynthesizerSpec(BaseModel):
    """Which synthesizer writes the new tasks."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = Field("taskset", min_length=1, description="taskset (variants of a built-in taskset's problems, "
                      "programmatic), llm (an OpenAI-compatible endpoint writes them), an entry point in "
                      "rftbus.synthesizers, or module:function / module:Class")
    params: dict[str, Any] = Field(default_factory=dict, description="the synthesizer's keyword arguments (llm: "
                                   "base_url, model, api_key_env, temperature, max_tokens); one named like a secret "
                                   "is never printed")


class SynthesisConfig(BaseModel):
    """The synthesize stage (`rftbus synthesize`, started by `rftbus run` when enabled): it reads the explorers'
    finished groups, picks parents by their outcome, asks the synthesizer for new tasks, and publishes those that
    are verified, new and within the quotas to topics.tasks with their lineage."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(False, description="`rftbus run` starts the synthesize stage")
    group_id: str = Field("rftbus-synthesize", description="its Kafka consumer group on the raw experience topic")
    id: str = Field("0", description="its status-file id")
    synthesizer: SynthesizerSpec = Field(default_factory=SynthesizerSpec, description="what writes new tasks")
    parents: list[Outcome] = Field(["failed", "mastered"], min_length=1, description="which finished tasks are "
                                   "parents: failed (no answer solved it), mastered (every answer did), mixed, "
                                   "zero_variance (every answer scored the same), any")
    solved_at: float = Field(1.0, description="an answer solves its task at this reward or more")
    difficulty: Literal["auto", "easier", "same", "harder"] = Field(
        "auto", description="what the synthesizer is asked for: auto = easier from a failed parent, harder from a "
        "mastered one, the same from a mixed one")
    per_parent: int = Field(2, ge=1, description="new tasks from one parent over the whole run (a parent drawn "
                            "again, or a replay, makes no more)")
    per_minute: float = Field(60.0, gt=0, description="new tasks a minute at most")
    max_share: float = Field(0.5, gt=0, le=1, description="synthesized tasks at most this share of all the tasks on "
                             "topics.tasks")
    max_generation: int = Field(2, ge=1, description="a task written from a synthesized one is one generation "
                                "further; none past this")
    timeout_s: float = Field(30.0, gt=0, description="a synthesizer call that takes longer is reported and its "
                             "parent skipped")
    verify: Literal["auto", "recompute", "consistency"] = Field(
        "auto", description="how a new task's answer is checked: recompute = the taskset recomputes it from the "
        "prompt and math-verify compares; consistency = the synthesizer's endpoint solves the new prompt "
        "`consistency_samples` times and at least `consistency_agree` of them must match; auto = recompute where "
        "the taskset can, else consistency where the synthesizer can solve, else the task is refused unverified")
    consistency_samples: int = Field(4, ge=1, description="solutions asked for in the consistency check")
    consistency_agree: float = Field(0.75, gt=0, le=1, description="the share of them that must match the answer")
    status_interval_s: float = Field(2.0, gt=0, description="how often its status file is rewritten")
