"""rftbus's vLLM engine on the real engine (vLLM's CPU build here) and a real pretrained chat model (SmolLM2-135M-
Instruct, fp32): groups as one request with n, behaviour logprobs against the trainer's recomputation, stop ids,
full-weight swaps through the worker extension with the prefix cache reset, greedy eval against the policy's own
greedy answers, LoRA versions by LoRARequest against PEFT, and versions that do not fit refused with the old one
still serving."""

from __future__ import annotations

import pytest
import torch

from rftbus.ground.config import Config
from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.errors import RftbusError
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.models.lora import Adapter, adapter_payload, from_payload, wrap
from rftbus.ground.models.prompt import prompt_format
from rftbus.producers.engines import make_engine
from rftbus.trainer.evaluate import engine_greedy, policy_greedy
from recompute import trainer_logp

# vLLM fp32 on CPU against transformers fp32 on CPU: the same model, other kernels (measured max 3e-4)
LOGP_ATOL = 2e-3
QUESTIONS = [f"What is {a} times {b}? Answer with the number only." for a, b in [(7, 8), (3, 9), (6, 12), (4, 11)]]


def cfg_for(folder: str, lora: dict | None = None, lora_mode: str = "auto") -> Config:
    return Config.model_validate({
        "model": {"name": "smollm2", "path": folder, "dtype": "float32"},
        "explorer": {"engine": {"kind": "vllm", "device": "cpu", "enforce_eager": True, "max_model_len": 512,
                                "kv_cache_gb": 0.5, "lora_mode": lora_mode}},
        "trainer": {"lora": lora}, "rl": {"max_staleness": 1}})


@pytest.fixture(scope="module")
def full(smollm2_folder):
    cfg = cfg_for(smollm2_folder)
    tok = load_tokenizer(cfg.model)
    engine = make_engine(cfg, tok)
    yield cfg, tok, engine
    engine.close()


def prompts_of(cfg, tok) -> list[list[int]]:
    fmt = prompt_format(tok, cfg.model)
    return [fmt.task(q) for q in QUESTIONS]


def test_a_group_is_one_request_with_n_and_logprobs_match_the_trainer(full):
    cfg, tok, engine = full
    p, q = prompts_of(cfg, tok)[:2]
    asked = []
    real = engine.llm.generate

    def spy(prompts, params, **kw):
        asked.append([sp.n for sp in params])
        return real(prompts, params, **kw)

    engine.llm.generate = spy
    try:
        comps = engine.generate([p] * 8 + [q] * 8, SamplingConfig(temperature=0.8, max_new_tokens=24, seed=1))
    finally:
        engine.llm.generate = real
    assert asked == [[8, 8]]  # two groups: two requests of 8, each prompt prefilled once
    assert len(comps) == 16 and all(len(c.logprobs) == len(c.response_ids) > 0 for c in comps)
    assert all(c.metadata["logprob_kind"] == "sampling" for c in comps)
    assert len({tuple(c.response_ids) for c in comps[:8]}) > 1  # sampled, not one answer 8 times
    model = load_policy(cfg.model, tok).eval()
    diffs = []
    for prompt, group in ((p, comps[:8]), (q, comps[8:])):
        for c, lp in zip(group, trainer_logp(model, tok, prompt, group, 0.8)):
            diffs.append(float((torch.tensor(c.logprobs) - lp).abs().max()))
    print(f"behaviour logprobs vs the trainer's recompute at T=0.8: max |diff| {max(diffs):.2e} over 16 answers")
    assert max(diffs) < LOGP_ATOL, diffs


def test_every_stop_id_ends_a_response(full):
    cfg, tok, engine = full
    stops = set(prompt_format(tok, cfg.model).stop_ids)
    comps = engine.generate([p for p in prompts_of(cfg, tok) for _ in range(4)],
                            SamplingConfig(temperature=1.0, max_new_tokens=48, seed=2))
    ended = [c for c in comps if c.finish_reason == "stop"]
    assert ended, "no answer ended within 48 tokens"
    for c in comps:
        assert not stops & set(c.response_ids[:-1]), c.response_ids  # nothing generated past a stop id
        if c.finish_reason == "stop":
            assert c.response_ids[-1] in stops
        else:
            assert len(c.response_ids) == 48


def test_greedy_eval_on_the_engine_equals_the_policys(full):
    cfg, tok, engine = full
    prompts = prompts_of(cfg, tok)
    fmt = prompt_format(tok, cfg.model)
    model = load_policy(cfg.model, tok).eval()
    mine = [fmt.cut(r)[0] for r in policy_greedy(model, tok.pad_token_id, list(fmt.stop_ids))(prompts, 16)]
    theirs = [fmt.cut(r)[0] for r in engine_greedy(engine)(prompts, 16)]
    assert theirs == mine


def test_a_full_swap_reaches_the_workers_resets_the_prefix_cache_and_a_misfit_is_refused(full):
    cfg, tok, engine = full
    prompts = prompts_of(cfg, tok)
    greedy = engine_greedy(engine)
    before = greedy(prompts, 12)
    base = load_policy(cfg.model, tok).state_dict()
    name, norm = "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight"
    g = torch.Generator().manual_seed(0)
    changed = {k: v.clone() for k, v in base.items()}
    changed[name] += torch.randn(changed[name].shape, generator=g) * 0.5
    changed[norm] *= 1.5
    engine.load_weights(changed, 1)
    assert engine.version == 1
    (held,) = engine.llm.collective_rpc("rftbus_weight_checksum", args=(norm,))
    assert held == pytest.approx(float(changed[norm].sum()), rel=1e-4)
    after = greedy(prompts, 12)
    assert after != before  # the new weights answer (the prompts' cached KV of the old ones was not reused)
    engine.load_weights(base, 2)
    assert greedy(prompts, 12) == before  # and back: nothing of v1 is left in the cache
    wrong = dict(base)
    wrong[name] = torch.zeros(3, 3)
    with pytest.raises(RftbusError, match="another shape"):
        engine.load_weights(wrong, 3)
    with pytest.raises(RftbusError, match="has not"):
        engine.load_weights({**base, "model.layers.99.foo": torch.zeros(1)}, 3)
    assert engine.version == 2 and greedy(prompts, 12) == before  # the old version keeps serving


@pytest.fixture(scope="module")
def lora(smollm2_folder):
    cfg = cfg_for(smollm2_folder, lora=LORA, lora_mode="adapter")
    tok = load_tokenizer(cfg.model)
    engine = make_engine(cfg, tok)
    yield cfg, tok, engine
    engine.close()


LORA = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def trained_adapter(cfg, tok, seed: int, r: int = 8):
    """A PEFT-wrapped policy whose adapter is random (as if trained), and its version payload as an Adapter."""
    spec = cfg.trainer.lora.model_copy(update={"r": r})
    peft = wrap(load_policy(cfg.model, tok), spec)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return peft.eval(), from_payload(*adapter_payload(peft))


def test_lora_versions_by_lorarequest_answer_as_peft_does_and_a_misfit_is_refused(lora):
    cfg, tok, engine = lora
    prompts = prompts_of(cfg, tok)
    fmt = prompt_format(tok, cfg.model)
    greedy = engine_greedy(engine)
    base = greedy(prompts, 12)
    peft, adapter = trained_adapter(cfg, tok, seed=3)
    engine.load_weights(adapter, 1)
    assert engine.version == 1 and engine.lora_request is not None and engine.lora_request.lora_name == "v1"
    want = [fmt.cut(r)[0] for r in policy_greedy(peft, tok.pad_token_id, list(fmt.stop_ids))(prompts, 12)]
    got = greedy(prompts, 12)
    assert [fmt.cut(r)[0] for r in got] == want and got != base
    _, too_wide = trained_adapter(cfg, tok, seed=4, r=16)
    with pytest.raises(RftbusError, match="rank 16"):
        engine.load_weights(too_wide, 2)
    other = Adapter(adapter.spec, "llama-0000000000000000", adapter.state)
    with pytest.raises(RftbusError, match="base model"):
        engine.load_weights(other, 2)
    assert engine.version == 1 and greedy(prompts, 12) == got  # v1 keeps serving


def test_on_the_cpu_build_a_lora_version_is_served_merged_and_answers_as_peft_does(full):
    """lora_mode auto on the CPU build: each LoRA version folded into full weights (the CPU build's LoRA kernels are
    slow), swapped through the worker extension; it answers as the PEFT model does, and a foreign adapter is refused."""
    folder = full[0].model.path
    cfg = cfg_for(folder, lora=LORA)
    tok = load_tokenizer(cfg.model)
    engine = make_engine(cfg, tok)
    try:
        assert engine.lora_mode == "merged"
        prompts = prompts_of(cfg, tok)
        fmt = prompt_format(tok, cfg.model)
        greedy = engine_greedy(engine)
        peft, adapter = trained_adapter(cfg, tok, seed=3)
        engine.load_weights(adapter, 1)
        assert engine.version == 1 and engine.lora_request is None
        want = [fmt.cut(r)[0] for r in policy_greedy(peft, tok.pad_token_id, list(fmt.stop_ids))(prompts, 12)]
        got = greedy(prompts, 12)
        assert [fmt.cut(r)[0] for r in got] == want
        with pytest.raises(RftbusError, match="base model"):
            engine.load_weights(Adapter(adapter.spec, "llama-0000000000000000", adapter.state), 2)
        assert engine.version == 1 and greedy(prompts, 12) == got
    finally:
        engine.close()
