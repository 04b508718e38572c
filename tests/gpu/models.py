"""Small models for the GPU suite, built from config (no download): head_dim 64, as GPU attention kernels
want, and about 30M parameters for the throughput figures."""

from __future__ import annotations

from rftbus.ground.config import Config

SMALL = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4,
         "max_position_embeddings": 2048}
MEDIUM = {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8,
          "max_position_embeddings": 4096}  # ~25M parameters with the char vocabulary


def config(tiny: dict, dtype: str = "float32", **extra) -> Config:
    return Config.model_validate({"model": {"tiny": tiny, "dtype": dtype}, **extra})


def saved_small(folder):
    """The SMALL model with random weights and its tokenizer, saved as a Hugging Face folder (what vLLM loads):
    (its config, tokenizer, model)."""
    from rftbus.ground.models.loading import load_policy, load_tokenizer

    cfg = config(SMALL)
    tok = load_tokenizer(cfg.model)
    lm = load_policy(cfg.model, tok)
    lm.save_pretrained(folder)
    tok.save_pretrained(folder)
    return cfg, tok, lm
