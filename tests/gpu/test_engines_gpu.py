"""Rollout engines on CUDA: the transformers engine's logprobs equal a forward pass at the same weights,
and a weight swap changes what it samples; the vLLM engine (if installed) samples n per prompt with
processed logprobs and takes a hot swap through its worker extension."""

from __future__ import annotations

import pytest
import torch

from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.producers.engines import make_engine
from recompute import trainer_logp
from tests.gpu.models import SMALL, config, saved_small


def test_transformers_engine_logprobs_match_a_forward_pass_and_swap():
    cfg = config(SMALL, **{"explorer": {"engine": {"device": "cuda"}}})
    tok = load_tokenizer(cfg.model)
    engine = make_engine(cfg, tok)
    prompt = tok("37+45=")["input_ids"]
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=32)
    comps = engine.generate([prompt] * 4, sampling)
    for c, lp in zip(comps, trainer_logp(engine.model, tok, prompt, comps, 0.8, "cuda")):
        assert torch.allclose(torch.tensor(c.logprobs), lp, atol=2e-3), (c.logprobs[:4], lp[:4])
    other = {k: torch.randn_like(v) * 0.02 for k, v in load_policy(cfg.model, tok).state_dict().items()}
    engine.load_weights(other, 7)
    assert engine.version == 7
    w = dict(engine.model.named_parameters())["model.embed_tokens.weight"]
    assert torch.equal(w.detach().cpu(), other["model.embed_tokens.weight"])


def test_vllm_engine_n_samples_processed_logprobs_and_hot_swap(tmp_path):
    from rftbus.producers.engines.vllm import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason:
        pytest.skip(f"vllm engine not testable here: {reason}")

    folder = tmp_path / "hf"
    _, tok, lm = saved_small(folder)
    cfg = config(SMALL, **{"model": {"path": str(folder), "tiny": SMALL},
                           "explorer": {"engine": {"kind": "vllm", "gpu_memory_utilization": 0.3,
                                                   "max_model_len": 512, "enforce_eager": True}}})
    engine = make_engine(cfg, load_tokenizer(cfg.model))
    prompt = tok("37+45=")["input_ids"]
    sampling = SamplingConfig(temperature=0.7, max_new_tokens=24)
    comps = engine.generate([prompt] * 8 + [prompt[:-1]] * 2, sampling)
    assert len(comps) == 10 and all(len(c.logprobs) == len(c.response_ids) for c in comps)
    assert all(c.metadata["logprob_kind"] == "sampling" for c in comps)
    # processed logprobs: the trainer's recompute at the sampling temperature agrees (fp32 both sides)
    ref = lm.to("cuda").eval()
    for c, lp in zip(comps[:8], trainer_logp(ref, tok, prompt, comps[:8], 0.7, "cuda")):
        assert torch.allclose(torch.tensor(c.logprobs), lp, atol=2e-2), (c.logprobs[:4], lp[:4])
    new = {k: v * 0 + 0.01 for k, v in lm.state_dict().items()}
    engine.load_weights(new, 3)
    (checksum,) = engine.llm.collective_rpc("rftbus_weight_checksum", args=("model.norm.weight",))
    assert checksum == pytest.approx(0.01 * new["model.norm.weight"].numel(), rel=1e-3)
    assert engine.version == 3
    engine.close()
