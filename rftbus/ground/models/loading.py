"""Building or loading the policy (`model:` section of the config).

Where the weights come from (a folder, a preset, a GGUF conversion) is models/source.py. The tiny model is a
Llama-architecture causal LM built from config with a fixed seed, so every
process (explorers, trainer) constructs the identical version-0 weights without any download.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig,
                          LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerBase)

from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.source import ModelError, model_folder
from rftbus.ground.models.tokenizer import build_char_tokenizer


def _pretrained_kwargs(cfg: ModelConfig) -> dict:
    kw: dict = {"trust_remote_code": cfg.trust_remote_code}
    if cfg.revision:
        kw["revision"] = cfg.revision
    return kw


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    """The policy's tokenizer; pad is the tokenizer's, else the generation config's, else eos (left padding)."""
    folder = model_folder(cfg)
    if folder is None:
        chars = build_char_tokenizer()
        if cfg.tiny.vision is not None:  # the tiny VLM's image placeholder (rftbus/ground/models/vision.py)
            from rftbus.ground.models.vision import IMAGE_TOKEN

            chars.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
        return chars
    try:
        tok = AutoTokenizer.from_pretrained(folder, **_pretrained_kwargs(cfg))
    except (OSError, ValueError) as e:
        raise ModelError(f"model {folder}: no tokenizer could be loaded ({str(e).splitlines()[0]})") from None
    if tok.pad_token is None:
        pad = generation_config(folder, cfg).pad_token_id
        if isinstance(pad, int) and 0 <= pad < len(tok):
            tok.pad_token = tok.convert_ids_to_tokens(pad)
        else:
            tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def generation_config(folder: str, cfg: ModelConfig) -> GenerationConfig:
    """The folder's generation config (its stop ids), or an empty one when it has none."""
    try:
        return GenerationConfig.from_pretrained(folder, **_pretrained_kwargs(cfg))
    except OSError:
        return GenerationConfig()


def dtype_name(cfg: ModelConfig, device: str | None = None) -> str:
    """model.dtype for a model that will run on `device` (None: the CPU, or the trainer, which keeps float32): as
    set, or for auto the checkpoint's own on a GPU and float32 elsewhere."""
    if cfg.dtype != "auto":
        return cfg.dtype
    folder = model_folder(cfg)
    if folder is None or device is None or not str(device).startswith(("cuda", "mps")):
        return "float32"
    try:
        conf = AutoConfig.from_pretrained(folder, **_pretrained_kwargs(cfg))
    except (OSError, ValueError):
        return "float32"
    own = getattr(conf, "dtype", None) or getattr(conf, "torch_dtype", None)
    name = str(own).removeprefix("torch.") if own is not None else "float32"
    return name if name in ("float32", "bfloat16", "float16") else "float32"


def load_policy(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase | None = None,
                device: str | None = None) -> PreTrainedModel:
    """Version-0 weights: the tiny model from `cfg.seed`, or the pretrained weights the config names, in the dtype
    `dtype_name` gives for `device` (where the caller will run it)."""
    dtype = getattr(torch, dtype_name(cfg, device))
    folder = model_folder(cfg)
    if folder is not None:
        kw = _pretrained_kwargs(cfg)
        if cfg.attn_implementation:
            kw["attn_implementation"] = cfg.attn_implementation
        from rftbus.ground.models.vision import is_vision

        auto: Any = AutoModelForCausalLM
        if is_vision(cfg):
            from transformers import AutoModelForImageTextToText as auto
        try:
            return auto.from_pretrained(folder, dtype=dtype, **kw)
        except (OSError, ValueError) as e:
            raise ModelError(f"model {folder}: {str(e).splitlines()[0]}") from None
    tok = tokenizer or load_tokenizer(cfg)
    if cfg.tiny.vision is not None:
        from rftbus.ground.models.vision import tiny_vlm

        return tiny_vlm(cfg, tok).to(dtype)
    t = cfg.tiny
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
        num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
        num_key_value_heads=t.num_attention_heads, max_position_embeddings=t.max_position_embeddings,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(cfg.seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    return model.to(dtype)


def context_of(model: Any) -> int | None:
    """Tokens the model attends to (a VLM's text model's), or None when its config does not say."""
    conf = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(conf, "max_position_embeddings", None) or None


def hidden_size_of(model: Any) -> int:
    """The width of the model's last hidden state (a VLM's text model's)."""
    conf = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(conf.hidden_size)


def takes_logits_to_keep(lm: Any) -> bool:
    """Whether the model's forward slices its hidden states before the LM head (`logits_to_keep`, transformers'
    causal LMs of the last versions); a PEFT wrapper passes it through to the model it wraps."""
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm
    return _forward_takes_keep(type(base).forward)


@functools.cache
def _forward_takes_keep(forward: Callable[..., Any]) -> bool:
    return "logits_to_keep" in inspect.signature(forward).parameters
