"""Building or loading the policy (`model:` section of the config).

The tiny model is a Llama-architecture causal LM built from config with a fixed seed, so every
process (explorers, trainer) constructs the identical version-0 weights without any download.
"""

from __future__ import annotations

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedModel,
                          PreTrainedTokenizerBase)

from rftbus.models.config import ModelConfig
from rftbus.models.tokenizer import build_char_tokenizer


def load_tokenizer(cfg: ModelConfig) -> PreTrainedTokenizerBase:
    if cfg.path is None:
        return build_char_tokenizer()
    tok = AutoTokenizer.from_pretrained(cfg.path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_policy(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase | None = None) -> PreTrainedModel:
    """Version-0 weights: the tiny model from `cfg.seed`, or the pretrained weights at `cfg.path`."""
    dtype = getattr(torch, cfg.dtype)
    if cfg.path is not None:
        return AutoModelForCausalLM.from_pretrained(cfg.path, dtype=dtype)
    tok = tokenizer or build_char_tokenizer()
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
