"""The `model:` config section (kept free of torch imports so every CLI command loads fast)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TinyModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hidden_size: int = Field(128, ge=8)
    intermediate_size: int = Field(256, ge=8)
    num_hidden_layers: int = Field(2, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    max_position_embeddings: int = Field(64, ge=8)


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field("tiny", description="model name: the key of its versions on the weights topic")
    path: str | None = Field(None, description="Hugging Face model id or folder; unset = the built-in tiny model")
    tiny: TinyModelConfig = TinyModelConfig()
    seed: int = 0
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
