"""The `trainer:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_id: str = "rftbus-trainer"
