"""The trainer's CUDA path: a step with each loss in bf16, ZeRO-2 and ZeRO-3 save and resume, gradient
checkpointing and token-budget micro-batches, tokens/s and peak memory printed for docs/BENCHMARKS.md."""

from __future__ import annotations

import time

import pytest
import torch

from rftbus.ground.config.trainer import TrainerConfig
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.trainer.batch import Row, collate
from tests.gpu.models import MEDIUM, SMALL, config


def rows(tok, n: int, length: int) -> list[Row]:
    """n rows of one prompt: RL samples with advantages +-1, a demonstration, a DPO pair."""
    prompt = tok("12+30=")["input_ids"]
    out = []
    for i in range(n):
        ids = [int(x) for x in torch.randint(4, len(tok) - 1, (length,))]
        e = Experience(response_ids=ids, logprobs=[-2.0] * length, loss_mask=[True] * length, model_version=0,
                       reward=float(i % 2), advantage=1.0 if i % 2 else -1.0)
        g = ExperienceGroup(task_id=f"t{i // 2}", explorer_id="gpu", prompt_ids=prompt, samples=[e])
        out.append(Row(g, e, expert=(i == 0)))
    return out


def setup(loss: str, zero: int = 2, tiny=SMALL, **trainer):
    from rftbus.trainer.policy import PolicyWithValue
    from rftbus.trainer.engine import build_engine
    from rftbus.trainer.losses import make_loss

    cfg = config(tiny)
    tok = load_tokenizer(cfg.model)
    tc = TrainerConfig(loss=loss, zero_stage=zero, precision="bf16", lr=1e-4, **trainer)
    lm = load_policy(cfg.model, tok)
    lm.config.use_cache = False
    if tc.gradient_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lossfn = make_loss(tc, 1)
    engine = build_engine(PolicyWithValue(lm, value_head=lossfn.needs_values), tc)
    ref = None
    if lossfn.uses_reference():
        ref = load_policy(cfg.model, tok).eval().to(engine.device, dtype=torch.bfloat16)
    return cfg, tok, tc, engine, lossfn, ref


@pytest.mark.parametrize("loss", ["grpo", "ppo", "sft", "mix", "dpo"])
def test_a_bf16_step_with_each_loss(one_rank, loss):
    from rftbus.trainer.step import train_step

    cfg, tok, tc, engine, lossfn, ref = setup(loss)
    assert next(engine.module.parameters()).dtype == torch.bfloat16 and engine.device.type == "cuda"
    rs = rows(tok, 8, 256)
    if loss == "dpo":  # pairs: rows 2k (chosen) and 2k+1 within one group
        for k in range(0, 8, 2):
            g = ExperienceGroup(task_id=f"p{k}", explorer_id="gpu", prompt_ids=rs[k].group.prompt_ids,
                                samples=[rs[k].sample, rs[k + 1].sample])
            rs[k], rs[k + 1] = Row(g, rs[k].sample), Row(g, rs[k + 1].sample)
    batch = collate(rs, tok.pad_token_id, 1024)
    before = {k: v.detach().float().clone() for k, v in engine.module.lm.named_parameters()}
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    parts = train_step(engine, lossfn, batch, ref)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    assert all(torch.isfinite(torch.tensor(v)) for v in parts.values()), parts
    moved = any(not torch.equal(before[k], v.detach().float()) for k, v in engine.module.lm.named_parameters())
    assert moved, f"{loss}: the step moved no weight"
    tokens = int(batch.attention_mask.sum())
    print(f"gpu step {loss}: {tokens / dt:,.0f} tokens/s, peak {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB")


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_save_and_resume(one_rank, tmp_path, zero):
    from rftbus.trainer.checkpoint import Checkpoints
    from rftbus.trainer.engine import policy_state_dict
    from rftbus.trainer.step import train_step

    cfg, tok, tc, engine, lossfn, ref = setup("grpo", zero=zero)
    batch = collate(rows(tok, 4, 64), tok.pad_token_id, 512)
    train_step(engine, lossfn, batch, ref)
    ck = Checkpoints(tmp_path, rank=0, world=1)
    path = ck.save(engine, step=1, version=1, positions=[[]], segment=[], loss="grpo")
    saved = {k: v.float().cpu() for k, v in policy_state_dict(engine)[0].items()}
    train_step(engine, lossfn, batch, ref)  # moves on past the checkpoint
    _, _, _, fresh, _, _ = setup("grpo", zero=zero)
    ck.restore(fresh, path, ck.latest()[1])
    back = {k: v.float().cpu() for k, v in policy_state_dict(fresh)[0].items()}
    assert saved.keys() == back.keys() and all(torch.equal(saved[k], back[k]) for k in saved)
    torch.cuda.reset_peak_memory_stats()
    train_step(fresh, lossfn, batch, ref)  # the optimizer state came back too: it steps
    print(f"gpu ZeRO-{zero}: resumed step peak {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB")


def test_long_responses_fit_with_checkpointing_and_micro_batches(one_rank):
    """~25M parameters, 8 responses of 3,000 tokens: micro-batches of 8k tokens, activations recomputed."""
    from rftbus.trainer.step import train_step

    cfg, tok, tc, engine, lossfn, ref = setup("grpo", tiny=MEDIUM, gradient_checkpointing=True,
                                              micro_batch_tokens=8192)
    batch = collate(rows(tok, 8, 3000), tok.pad_token_id, 4096)
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    parts = train_step(engine, lossfn, batch, ref, micro_tokens=tc.micro_batch_tokens)
    torch.cuda.synchronize()
    assert parts["micro_batches"] >= 3 and torch.isfinite(torch.tensor(parts["loss"]))
    print(f"gpu long responses: {int(batch.attention_mask.sum()) / (time.perf_counter() - t):,.0f} tokens/s, "
          f"{parts['micro_batches']:.0f} micro-batches, peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
