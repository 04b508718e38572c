"""One prompt format (models/prompt.py) with the real SmolLM2-135M-Instruct tokenizer and chat template: the
same conversation gives byte-equal prompt ids on every path (explorer workflow, demonstrations, serve, held-out
eval), special tokens once, and a response ends at the template's end of turn. Bad model input fails in one
line before any work."""

from __future__ import annotations

import struct

import pytest
from conftest import SMOLLM2, make_config

from rftbus.ground.config.explorer import RewardSpec, SamplingConfig
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.models.prompt import PromptFormat, prompt_format
from rftbus.ground.models.source import ModelError, convert_gguf
from rftbus.producers.engines.transformers import TransformersEngine
from rftbus.producers.experience import expert_group
from rftbus.ground.rewards import make_rewards
from rftbus.producers.serve.protocol import ChatRequest, chat_prompt
from rftbus.producers.workflows import RolloutContext, load_workflow
from rftbus.ground.schemas import Task
from rftbus.ground.tasksets import get_taskset
from rftbus.trainer.evaluate import evaluate

QUESTION = "What is 17 + 25? Answer with the number only."


@pytest.fixture(scope="module")
def real(smollm2_folder, tmp_path_factory):
    cfg = make_config(tmp_path_factory.mktemp("real"), 9092, **SMOLLM2, **{"explorer.sampling.seed": 0})
    tok = load_tokenizer(cfg.model)
    return cfg, tok, prompt_format(tok, cfg.model)


def test_the_chat_template_renders_once_with_its_own_special_tokens(real):
    cfg, tok, fmt = real
    assert fmt.template and tok.convert_ids_to_tokens(fmt.stop_ids[:1]) == ["<|im_end|>"]
    assert tok.convert_ids_to_tokens(fmt.stop_ids) == ["<|im_end|>", "<|im_start|>"]  # GGUF's eos is <|im_start|>
    ids = fmt.task(QUESTION)
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith(f"user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n")
    # transformers 5.x returns a BatchEncoding from tokenize=True: the ids, not the names of its keys
    native = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=True)
    assert ids == list(native["input_ids"])
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3  # system, user, assistant: none added twice
    with_system = PromptFormat.for_model(tok, ModelConfig(system_prompt="Be brief."), 2).task(QUESTION)
    assert tok.decode(with_system).startswith("<|im_start|>system\nBe brief.<|im_end|>")


def test_every_path_renders_the_same_prompt_ids(real, monkeypatch):
    cfg, tok, fmt = real
    task = Task(task_id="t1", taskset="x", split="eval", prompt=QUESTION, answer="42")
    want = fmt.task(QUESTION)
    # serve: a chat request with the one user message
    served, _, _ = chat_prompt(fmt, ChatRequest.model_validate({"messages": [{"role": "user", "content": QUESTION}]}))
    # demonstrations (taskset experts, corrections): the prompt, and the answer ending in <|im_end|>
    demo = expert_group(task, "42", fmt, "test")
    assert demo.samples[0].response_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    # the explorer's workflow, with the real weights: what the engine was asked to continue
    engine = TransformersEngine(cfg, tok)
    seen: list[list[int]] = []
    real_generate = engine.generate
    monkeypatch.setattr(engine, "generate", lambda prompts, s, m=None: seen.extend(prompts) or real_generate(prompts, s, m))
    ctx = RolloutContext(engine, tok, SamplingConfig(max_new_tokens=12, temperature=0.7), make_rewards([RewardSpec(name="math")]),
                         cfg.explorer.workflow, fmt)
    samples = load_workflow("single_turn").run(task, 2, ctx)
    # held-out eval: what the model's generate was given (left padding stripped)
    given: list[list[int]] = []
    model = engine.model
    real_model_generate = model.generate

    def spy(**kw):
        given.extend([row[m.bool()].tolist() for row, m in zip(kw["input_ids"], kw["attention_mask"])])
        return real_model_generate(**kw)

    monkeypatch.setattr(model, "generate", spy)

    class One:
        def tasks(self, split, n, seed=0):
            return [task]

        def score(self, text, answer):
            return {"reward": float(answer in text)}

    evaluate(model, fmt, One(), 1, max_new_tokens=12)
    assert served == want and demo.prompt_ids == want and samples[0].prompt_ids == want
    assert seen == [want, want] and given == [want]


def test_the_real_model_stops_at_the_end_of_its_turn(real):
    cfg, tok, fmt = real
    engine = TransformersEngine(cfg, tok)
    outs = engine.generate([fmt.task(QUESTION)] * 2, SamplingConfig(max_new_tokens=32, temperature=0.01))
    for c in outs:
        assert c.finish_reason == "stop" and c.response_ids[-1] in fmt.stop_ids, c
        assert "<|im_end|>" not in c.text and "17" in c.text and len(c.response_ids) == len(c.logprobs)


def test_bad_model_input_is_one_line_before_any_work(tmp_path, smollm2_folder):
    tiny = ModelConfig(chat_template=True)
    with pytest.raises(ModelError, match="has no chat template"):
        prompt_format(load_tokenizer(tiny), tiny)
    with pytest.raises(ModelError, match="system_prompt needs a chat template"):
        prompt_format(load_tokenizer(ModelConfig()), ModelConfig(system_prompt="hi"))
    with pytest.raises(ModelError, match="does not exist"):
        load_tokenizer(ModelConfig(gguf_file=str(tmp_path / "nope.gguf")))
    # a GGUF of an architecture transformers cannot load (written with the gguf package itself)
    import gguf

    path = tmp_path / "other.gguf"
    w = gguf.GGUFWriter(str(path), "rwkv7")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", __import__("numpy").zeros((4, 4), dtype="float32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match="rwkv7"):
        convert_gguf(path, tmp_path / "cache")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + struct.pack("<I", 99) + b"\0" * 64)
    with pytest.raises(ModelError, match="junk.gguf"):
        convert_gguf(junk, tmp_path / "cache")
    # an existing folder that is no model
    with pytest.raises(ModelError, match="no tokenizer"):
        load_tokenizer(ModelConfig(path=str(tmp_path)))
    assert load_policy(ModelConfig(path=str(smollm2_folder))).config.num_hidden_layers == 30
    assert get_taskset("addition")  # the toy path is untouched
