"""A LoRA trainer's checkpoint holds what trains (the adapter, its optimizer state), not the frozen base model
(rftbus/trainer/checkpoint.py: 538 MB and ~2 s a step for SmolLM2-135M); a fresh engine restored from it continues
exactly: same adapter, same optimizer moments, same base weights (rebuilt from the model folder). A tied
embedding's alias stays in it (DeepSpeed drops frozen weights by parameter name; the alias has none)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from rftbus.ground.config import Config
from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.lora import wrap
from rftbus.trainer.dist import prepare_env
from tests.integration.test_grpo_direction import dist_env  # noqa: F401 - the fixture


def _engine(folder):
    from rftbus.trainer.engine import build_engine
    from rftbus.trainer.policy import PolicyWithValue

    torch.manual_seed(0)
    lm = wrap(AutoModelForCausalLM.from_pretrained(folder), LoraSpec(r=4, alpha=8))
    return build_engine(PolicyWithValue(lm, value_head=False), Config().trainer.model_copy(update={"lr": 1e-2}))


def test_a_lora_checkpoint_holds_the_adapter_and_restores_exactly(tmp_path, smollm2_two_layers, dist_env):  # noqa: F811
    prepare_env()
    from rftbus.trainer.checkpoint import Checkpoints, has_frozen

    engine = _engine(smollm2_two_layers)
    assert has_frozen(engine)
    ids = torch.randint(100, 2000, (2, 12))
    logits, _ = engine(ids, torch.ones_like(ids))
    engine.backward(logits.float().logsumexp(-1).mean())
    engine.step()
    ck = Checkpoints(tmp_path / "ck", 0, 1)
    path = ck.save(engine, 1, 1, [[]], [], "grpo")
    saved = torch.load(next(path.rglob("*model_states.pt")), weights_only=False)
    names = {n for n, p in engine.module.named_parameters() if p.requires_grad}
    frozen = set(saved["module"]) - names
    # DeepSpeed drops frozen weights by their named_parameters() names; a tied alias (lm_head = embed_tokens)
    # has none, so it stays: the one frozen tensor saved
    assert frozen <= set(saved["shared_params"]), f"frozen weights in the checkpoint: {sorted(frozen)[:5]}"
    assert len(saved["module"]) - len(frozen) == len(names)
    trained = {n: p.detach().clone() for n, p in engine.module.named_parameters() if p.requires_grad}
    moments = {k: v["exp_avg"].clone() for k, v in engine.optimizer.optimizer.state_dict()["state"].items()}

    fresh = _engine(smollm2_two_layers)
    assert any(not torch.equal(p, trained[n]) for n, p in fresh.module.named_parameters() if p.requires_grad)
    latest = ck.latest()
    assert latest is not None
    ck.restore(fresh, *latest)
    for n, p in fresh.module.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, trained[n]), n
    got = fresh.optimizer.optimizer.state_dict()["state"]  # ZeRO wraps the AdamW
    assert moments and all(torch.equal(got[k]["exp_avg"], v) for k, v in moments.items())
    frozen = dict(engine.module.named_parameters())
    assert all(torch.equal(p, frozen[n]) for n, p in fresh.module.named_parameters() if not p.requires_grad)
