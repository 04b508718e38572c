"""The `run:` config section: what the main job starts, for how long, and how it evaluates."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    explorers: int = Field(1, ge=1, description="explorer processes (one consumer group)")
    streams_workers: int = Field(1, ge=1)
    tasks: int = Field(2000, ge=1, description="train tasks of the built-in taskset published at start")
    expert: bool = Field(True, description="also publish expert demonstrations (needed by the mix/sft losses)")
    expert_epochs: int = Field(1, ge=1, description="passes of demonstrations (each pass new ids): the trainer "
                               "reads each record once, so more passes mean more SFT steps; later passes are "
                               "published in the background while the loop runs")
    task_passes: int = Field(1, ge=1, description="passes over the tasks (later passes published in the "
                             "background, each task with a new id so it is rolled out again)")
    max_minutes: float = Field(15.0, gt=0, description="wall-clock budget; the job stops cleanly after it")
    max_steps: int | None = Field(None, ge=1, description="stop once the trainer reached this step")
    target_eval_reward: float | None = Field(None, description="stop early once eval reaches this")
    eval_n: int = Field(64, ge=1, description="held-out eval tasks scored per evaluation")
    eval_every_versions: int = Field(1, ge=1, description="evaluate every k-th published version")
    max_restarts: int = Field(3, ge=0, description="restarts per crashed child before giving up on it")
    analytics: bool = Field(True, description="run the analytics sink too, when it is installed")
    serve: bool = Field(False, description="also run `rftbus serve` (the live-traffic proxy, on serve.host:"
                        "serve.port) as a supervised child")
