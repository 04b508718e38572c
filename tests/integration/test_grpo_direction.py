"""One GRPO update moves the policy the right way, through the code the trainer runs.

The chain under test is the real one: the explorer's engine samples a group, streams' GRPO estimator
turns rewards into advantages, `collate` builds the batch, and `train_step` runs the GRPO loss through
a DeepSpeed engine (ZeRO-1, AdamW, clipping) around `PolicyWithValue`. After one step the sampled
answer with a positive advantage must be more likely and the one with a negative advantage less
likely. Pure tensors plus in-process DeepSpeed: no broker.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from rftbus.ground.config import Config
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.producers.engines.transformers import TransformersEngine
from rftbus.ground.models.prompt import PromptFormat
from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.streams.advantages.grpo import GRPO
from rftbus.trainer.batch import collate, rows_of
from rftbus.ground.config.trainer import TrainerConfig
from rftbus.trainer.losses import make_loss
from rftbus.trainer.policy import PolicyWithValue, token_logp_entropy


@pytest.fixture
def dist_env():
    """In-process DeepSpeed: its env vars exist for this test only (subprocess tests must not inherit them)."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    yield
    for k in names:
        os.environ.pop(k, None)
    os.environ.update(saved)


def sample_two_distinct(cfg: Config, tok, lm, prompt_ids: list[int]):
    """Two different completions of one prompt, sampled as the explorer samples them."""
    engine = TransformersEngine(cfg, tok, model=copy.deepcopy(lm))
    torch.manual_seed(1)
    for _ in range(20):
        done = engine.generate([prompt_ids] * 8, cfg.explorer.sampling)
        distinct = {tuple(c.response_ids): c for c in done}
        if len(distinct) >= 2:
            return list(distinct.values())[:2]
    raise AssertionError("the engine sampled the same completion 160 times")


def response_logp(model: torch.nn.Module, batch) -> torch.Tensor:
    """Sum of the trained tokens' logprobs per row, as the trainer computes them."""
    with torch.no_grad():
        logits, _ = model(batch.input_ids, batch.attention_mask)
        logp, _ = token_logp_entropy(logits, batch)
    return (logp * batch.mask).sum(-1)


def grpo_setup(eta: int, update_epochs: int = 1, lr: float = 2e-3, **trainer):
    """A fresh tiny policy in a DeepSpeed engine, its GRPO loss, and a batch of one good, one bad answer."""
    from rftbus.trainer.dist import prepare_env

    prepare_env()  # before deepspeed is imported, as the trainer does
    from rftbus.trainer.engine import build_engine

    cfg = Config.model_validate({"explorer": {"sampling": {"temperature": 1.0, "max_new_tokens": 6}}})
    tok = load_tokenizer(cfg.model)
    lm = load_policy(cfg.model, tok)
    prompt_ids = PromptFormat.for_model(tok, cfg.model).task("37+45=")
    good, bad = sample_two_distinct(cfg, tok, lm, prompt_ids)
    advantages = GRPO().advantages([1.0, 0.0])  # streams' group normalisation: [+1, -1]
    assert advantages[0] > 0 > advantages[1]
    samples = [Experience(response_ids=c.response_ids, logprobs=c.logprobs, loss_mask=[True] * len(c.response_ids),
                          model_version=0, reward=r, advantage=a, metadata=dict(c.metadata))
               for c, r, a in zip((good, bad), (1.0, 0.0), advantages)]
    group = ExperienceGroup(task_id="t", explorer_id="x", prompt_ids=prompt_ids, samples=samples, survivors=[0, 1])

    tc = TrainerConfig(loss="grpo", lr=lr, update_epochs=update_epochs, **trainer)  # 2e-3: the toy config's
    torch.manual_seed(tc.seed)
    lm.config.use_cache = False
    module = PolicyWithValue(lm, value_head=False)
    engine = build_engine(module, tc)
    loss = make_loss(tc, eta)
    assert loss.off_policy == ("decoupled" if eta else "none")
    batch = collate(rows_of(group), tok.pad_token_id, 64)
    assert int(batch.mask.sum()) == len(good.response_ids) + len(bad.response_ids)
    return engine, loss, batch, (good, bad)


@pytest.mark.parametrize("eta", [0, 1], ids=["on-policy", "decoupled"])
def test_one_grpo_step_raises_the_positive_answer_and_lowers_the_negative(dist_env, eta):
    from rftbus.trainer.step import train_step

    engine, loss, batch, (good, bad) = grpo_setup(eta)

    before = response_logp(engine, batch)
    # what the explorer recorded is what the trainer recomputes (the ratio starts at 1)
    assert torch.allclose(before, torch.tensor([sum(good.logprobs), sum(bad.logprobs)]), atol=1e-3)
    parts = train_step(engine, loss, batch)
    after = response_logp(engine, batch)

    assert parts["grad_norm"] > 0
    assert after[0] > before[0], (before.tolist(), after.tolist())
    assert after[1] < before[1], (before.tolist(), after.tolist())


def test_update_epochs_reuse_the_batch_for_more_optimizer_steps(dist_env):
    """trainer.update_epochs = 4 (configs/toy-grpo-reverse.yaml): DeepSpeed takes four optimizer steps on
    one batch, against the first epoch's logprobs as the proximal policy, and moves it further than one step."""
    from rftbus.trainer.step import train_step

    moved = {}
    for epochs in (1, 4):
        engine, loss, batch, _ = grpo_setup(1, epochs, lr=3e-4)  # that config's learning rate
        before = response_logp(engine, batch)
        parts = train_step(engine, loss, batch, update_epochs=epochs)
        after = response_logp(engine, batch)
        assert engine.global_steps == epochs
        assert after[0] > before[0] and after[1] < before[1], (epochs, before.tolist(), after.tolist())
        moved[epochs] = float((after[0] - before[0]) - (after[1] - before[1]))
        assert all(torch.isfinite(torch.tensor(v)) for v in parts.values())
    assert moved[4] > 1.3 * moved[1], moved  # not 4x: the ratio clip (vs epoch 0) bounds epochs 2-4


def test_the_lr_schedule_drives_deepspeeds_optimizer(dist_env):
    """trainer.lr_decay_steps through the real engine: DeepSpeed steps the scheduler once per optimizer
    step, so after 4 update epochs of a 4-step cosine the rate is at its floor."""
    from rftbus.trainer.step import train_step

    engine, loss, batch, _ = grpo_setup(1, 4, lr=1e-3, lr_decay_steps=4, lr_min_ratio=0.1)
    assert engine.get_lr()[0] == pytest.approx(1e-3)
    train_step(engine, loss, batch, update_epochs=2)
    assert engine.get_lr()[0] == pytest.approx(1e-3 * 0.55)
    train_step(engine, loss, batch, update_epochs=2)
    assert engine.get_lr()[0] == pytest.approx(1e-4)


def test_kl_cov_holds_the_tokens_whose_covariance_drives_entropy_down(dist_env):
    """trainer.kl_cov_ratio (KL-Cov) through the real engine: with four update epochs, the held tokens are
    kept near the proximal policy, so the batch moves less than without it; off, the loss is GRPO's own."""
    from rftbus.trainer.step import train_step

    moved, held = {}, {}
    for ratio in (0.0, 0.5):
        engine, loss, batch, _ = grpo_setup(1, 4, lr=3e-4, kl_cov_ratio=ratio, kl_cov_coef=5.0)
        before = response_logp(engine, batch)
        parts = train_step(engine, loss, batch, update_epochs=4)
        after = response_logp(engine, batch)
        assert after[0] > before[0] and after[1] < before[1], (ratio, before.tolist(), after.tolist())
        moved[ratio] = float((after[0] - before[0]) - (after[1] - before[1]))
        held[ratio] = parts.get("kl_cov_tokens")
    assert held[0.0] is None and held[0.5] == int(0.5 * int(batch.mask.sum()))
    assert moved[0.5] < 0.9 * moved[0.0], moved


def test_kl_cov_picks_the_tokens_with_the_largest_logprob_advantage_covariance():
    """Logic only: the penalty falls on the top-k of (logp - mean)(A - mean) and is zero at the proximal policy."""
    from rftbus.trainer.losses.terms import kl_cov

    logp = torch.tensor([[-0.1, -3.0], [-2.0, -0.2]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.ones(2, 2, dtype=torch.bool)
    penalty, k = kl_cov(logp, logp.detach(), adv, mask, 0.25)
    assert k == 1 and float(penalty.detach()) == 0.0  # at the proximal policy: no pull yet
    shifted = logp.detach() - 0.5
    penalty, _ = kl_cov(logp, shifted, adv, mask, 0.25)
    penalty.backward()
    # (-0.1 - mean)·(1 - 0) is the largest covariance: only that token is pulled back
    assert logp.grad is not None and logp.grad[0, 0] != 0 and int((logp.grad != 0).sum()) == 1
    assert kl_cov(logp, shifted, adv, mask, 0.1)[1] == 0  # fewer than one token: off
