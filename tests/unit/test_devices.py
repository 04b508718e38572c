"""Devices per role (models/devices.py): the specs a config takes, what each role is shown, and the held-out
eval on an engine of the explorers' kind giving what the policy's own greedy generate gives."""

from __future__ import annotations

import pytest
import torch

from rftbus.ground.errors import RftbusError
from rftbus.ground.models.devices import check_spec, indices, problem, resolve, show_only


@pytest.mark.parametrize("spec", ["auto", "cpu", "mps", "cuda", "cuda:0", "cuda:3", "cuda:0,1"])
def test_device_specs_a_config_takes(spec):
    assert check_spec(spec) == spec


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:a", "cuda:0,", "CPU", "cuda0", ""])
def test_a_device_that_is_not_one_names_what_is_accepted(spec):
    with pytest.raises(ValueError, match="is not a device: use auto, cpu, mps, cuda"):
        check_spec(spec)


def test_the_config_refuses_a_bad_device_for_each_role():
    from pydantic import ValidationError

    from rftbus.ground.config import Config

    for section, key in (("trainer", "device"), ("run", "eval_device")):
        with pytest.raises(ValidationError, match=f"{section}.{key}"):
            Config.model_validate({section: {key: "gpu1"}})
    with pytest.raises(ValidationError, match="explorer.engine.device"):
        Config.model_validate({"explorer": {"engine": {"device": "cuda1"}}})


def test_a_role_is_shown_only_its_gpus_counted_within_what_it_was_shown():
    env: dict[str, str] = {}
    assert show_only("cuda:1", env) == "cuda" and env["CUDA_VISIBLE_DEVICES"] == "1"
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}  # a scheduler gave this process GPUs 2 and 3: cuda:1 is GPU 3
    assert show_only("cuda:1", env) == "cuda" and env["CUDA_VISIBLE_DEVICES"] == "3"
    env = {"CUDA_VISIBLE_DEVICES": "5,6,7"}
    show_only("cuda:0,2", env)
    assert env["CUDA_VISIBLE_DEVICES"] == "5,7"
    env = {"CUDA_VISIBLE_DEVICES": "4"}
    with pytest.raises(RftbusError, match=r"shown 1 GPU\(s\) \(CUDA_VISIBLE_DEVICES=4\), so there is no cuda:1"):
        show_only("cuda:1", env)
    assert env["CUDA_VISIBLE_DEVICES"] == "4"  # unchanged by the refusal
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert show_only("cpu", env) == "cpu" and env["CUDA_VISIBLE_DEVICES"] == ""
    for spec in ("auto", "cuda", "mps"):
        env = {}
        assert show_only(spec, env) == spec and env == {}


def test_resolve_hands_a_torch_device():
    assert resolve("cpu") == torch.device("cpu")
    assert resolve("cuda:2,3") == torch.device("cuda:2") and indices("cuda:2,3") == [2, 3]
    assert resolve("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_check_names_a_role_on_a_gpu_the_machine_does_not_show():
    assert problem("trainer.device", "cuda:1", 1) == "trainer.device is cuda:1: this machine shows 1 CUDA device(s) (cuda:0..cuda:0)"
    assert problem("run.eval_device", "cuda", 0) == "run.eval_device is cuda: this machine shows no CUDA device"
    assert problem("trainer.device", "cuda:0,1", 2) is None and problem("x", "cpu", 0) is None


def test_the_trainer_on_cpu_hides_the_gpus_and_takes_deepspeed_s_cpu_accelerator(monkeypatch):
    from rftbus.trainer.dist import prepare_env

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DS_ACCELERATOR", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MASTER_PORT", "29999")
    d = prepare_env("cpu")
    import os

    assert (d.rank, d.world, d.local_rank) == (0, 1, 0)
    assert os.environ["DS_ACCELERATOR"] == "cpu" and os.environ["CUDA_VISIBLE_DEVICES"] == ""


def test_a_rank_without_a_listed_gpu_is_refused(monkeypatch):
    from rftbus.trainer.dist import prepare_env

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_PORT", "29999")
    with pytest.raises(RftbusError, match=r"trainer.device is cuda:0: 1 GPU\(s\) for local rank 1"):
        prepare_env("cuda:0")


def test_eval_on_the_explorers_engine_gives_the_policy_s_greedy_answers():
    """run.eval_engine: explorer scores through engine.generate at top-k 1: the same answers, token for token,
    as the policy's own greedy generate (one eval, two ways of decoding)."""
    from rftbus.ground.config import Config
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.producers.engines.transformers import TransformersEngine
    from rftbus.ground.tasksets import get_taskset
    from rftbus.trainer.evaluate import engine_greedy, evaluate, policy_greedy

    cfg = Config.model_validate({"explorer": {"engine": {"device": "cpu"}}})
    tok = load_tokenizer(cfg.model)
    torch.manual_seed(0)
    model = load_policy(cfg.model, tok)
    with torch.no_grad():  # weights far from init, so answers differ from prompt to prompt (not one token repeated)
        for p in model.parameters():
            p.normal_(0, 0.3)
    fmt = prompt_format(tok, cfg.model)
    engine = TransformersEngine(cfg, tok, model=model, prompt=fmt)
    ts = get_taskset("addition")
    prompts = [fmt.of_task(t) for t in ts.tasks("eval", 12, seed=0)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    by_policy = [fmt.cut(r)[0] for r in policy_greedy(model, pad, fmt.stop_ids)(prompts, 6)]
    by_engine = [fmt.cut(r)[0] for r in engine_greedy(engine)(prompts, 6)]
    assert len({tuple(r) for r in by_policy}) >= 8, by_policy
    assert by_engine == by_policy
    assert evaluate(engine_greedy(engine), fmt, ts, 12, max_new_tokens=6) == evaluate(model, fmt, ts, 12, max_new_tokens=6)
