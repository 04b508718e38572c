"""The `streams:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StreamsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    app_id: str = "rftbus-streams"
