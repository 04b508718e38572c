"""The `serve:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="listen address (0.0.0.0 to accept remote agents)")
    port: int = Field(8000, ge=1, le=65535)
    inference_tokens: list[SecretStr] = Field(default_factory=list, description="bearer tokens for /v1/*completions")
    feedback_tokens: list[SecretStr] = Field(default_factory=list, description="bearer tokens for /v1/feedback")
