"""Rollout engines behind one interface: transformers (default), vllm (GPU), openai (any endpoint)."""

from __future__ import annotations

from rftbus.ground.config import Config
from rftbus.producers.engines.base import Completion, RolloutEngine

__all__ = ["Completion", "RolloutEngine", "make_engine"]


def make_engine(cfg: Config, tokenizer) -> RolloutEngine:
    """Build the engine named by `explorer.engine.kind` (imports are lazy: vllm needs a GPU)."""
    kind = cfg.explorer.engine.kind
    if kind == "transformers":
        from rftbus.producers.engines.transformers import TransformersEngine
        return TransformersEngine(cfg, tokenizer)
    if kind == "vllm":
        from rftbus.producers.engines.vllm import VllmEngine
        return VllmEngine(cfg, tokenizer)
    if kind == "openai":
        from rftbus.producers.engines.openai import OpenAIEngine
        return OpenAIEngine(cfg, tokenizer)
    from rftbus.ground.plugins import load_object
    return load_object(kind, group="rftbus.engines", what="rollout engine")(cfg, tokenizer)
