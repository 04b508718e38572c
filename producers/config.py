"""The `explorer:` and `taskset:` config sections (pydantic only: no heavy imports here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ExplorerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_id: str = "rftbus-explorers"


class TasksetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "addition"
