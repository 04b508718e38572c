"""The `model:` config section (kept free of torch imports so every CLI command loads fast)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TinyVisionConfig(BaseModel):
    """The built-in tiny VLM's image side (model.tiny.vision set): a CLIP vision tower and a LLaVA projector in
    front of the tiny Llama, random init from model.seed (#62; no small pretrained VLM is on these machines)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    image_size: int = Field(32, ge=8, description="images are resized and cropped to this square, in pixels")
    patch_size: int = Field(8, ge=2, description="the vision tower's patch: (image_size / patch_size)^2 image "
                            "tokens per image in the prompt")
    hidden_size: int = Field(64, ge=8, description="the vision tower's width")
    intermediate_size: int = Field(128, ge=8, description="the vision tower's MLP width")
    num_hidden_layers: int = Field(2, ge=1, description="the vision tower's layers")
    num_attention_heads: int = Field(4, ge=1, description="the vision tower's attention heads")


class TinyModelConfig(BaseModel):
    """The built-in tiny Llama's shape (model.path unset): tests and toy runs in seconds."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    hidden_size: int = Field(128, ge=8, description="the built-in tiny model's width")
    intermediate_size: int = Field(256, ge=8, description="the tiny model's MLP width")
    num_hidden_layers: int = Field(2, ge=1, description="the tiny model's layers")
    num_attention_heads: int = Field(4, ge=1, description="the tiny model's attention heads")
    max_position_embeddings: int = Field(64, ge=8, description="the tiny model's context, in tokens")
    vision: TinyVisionConfig | None = Field(None, description="set: the tiny model is a vision-language model "
                                            "(LLaVA: a tiny CLIP tower + projector + the tiny Llama) that reads "
                                            "the images of a task's prompt")


class LoraSpec(BaseModel):
    """A LoRA adapter (PEFT): what the trainer trains and each weight version carries instead of the model."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    r: int = Field(16, ge=1, description="rank of each adapter's A·B update")
    alpha: float = Field(32.0, gt=0, description="scaling: the update is multiplied by alpha / r")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter's input")
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
                                      min_length=1, description="names of the Linear modules that get an adapter")


class ModelConfig(BaseModel):
    """The policy model: a preset, a Hugging Face folder or hub id, a GGUF, or the built-in tiny model."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = Field("tiny", description="model name: the key of its versions on the weights topic; a preset's "
                      "name (smollm2-135m-instruct) with no path or gguf_file loads that preset's weights")
    path: str | None = Field(None, description="Hugging Face folder (or hub id where the hub is reachable); unset = "
                             "the built-in tiny model, or the preset `name` names")
    revision: str | None = Field(None, description="hub revision (branch, tag or commit) of `path`")
    trust_remote_code: bool = Field(False, description="allow the model folder's own Python code (off: refuse it)")
    attn_implementation: str | None = Field(None, description="transformers attention kernel (eager, sdpa, ...); "
                                            "unset = transformers' default")
    gguf_file: str | None = Field(None, description="a GGUF file (a path, or a file name inside `path`): dequantized "
                                  "once into a safetensors folder under cache_dir that every process reuses")
    cache_dir: Path | None = Field(None, description="where GGUF conversions are kept; default <state_dir>/models")
    chat_template: bool | None = Field(None, description="render prompts with the tokenizer's chat template: "
                                       "true requires one, false never, unset uses it when the tokenizer has one")
    system_prompt: str | None = Field(None, description="system message put before every task's prompt "
                                      "(chat template only); unset = the template's own default")
    tiny: TinyModelConfig = TinyModelConfig()
    seed: int = Field(0, description="seed of the tiny model's random weights")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="the weights' dtype where a model is loaded to generate (explorers, eval) or train; "
        "auto: the checkpoint's own (config.json) for generation on a GPU, float32 on the CPU (bf16 kernels are "
        "slower there) and in the trainer (DeepSpeed keeps float32 master weights; trainer.precision picks bf16)")
