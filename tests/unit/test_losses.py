"""Losses against hand-computed values (pure tensor logic: no broker, no DeepSpeed)."""

from __future__ import annotations

import math

import pytest
import torch

from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.trainer.batch import Row, collate, whiten_advantages
from rftbus.ground.config.trainer import TrainerConfig
from rftbus.trainer.losses import make_loss, resolve_off_policy
from rftbus.trainer.losses.base import PolicyOut, TrainBatch
from rftbus.trainer.losses.dpo import DPOLoss
from rftbus.trainer.losses.grpo import GRPOLoss
from rftbus.trainer.losses.mix import MIXLoss
from rftbus.trainer.losses.ppo import PPOLoss, gae
from rftbus.trainer.losses.sft import SFTLoss
from rftbus.trainer.losses.terms import kl_k3, masked_mean, policy_gradient

LN = math.log


def batch_of(mask, adv=None, behav=None, rewards=None, expert=None, pair=None, preferred=None) -> TrainBatch:
    mask = torch.tensor(mask, dtype=torch.bool)
    n, t = mask.shape
    return TrainBatch(
        input_ids=torch.zeros((n, t + 1), dtype=torch.long), attention_mask=torch.ones((n, t + 1), dtype=torch.long),
        targets=torch.zeros((n, t), dtype=torch.long), mask=mask, response=mask.clone(),
        behav_logp=torch.tensor(behav, dtype=torch.float32) if behav is not None else torch.zeros((n, t)),
        advantages=torch.tensor(adv if adv is not None else [0.0] * n, dtype=torch.float32),
        rewards=torch.tensor(rewards if rewards is not None else [0.0] * n, dtype=torch.float32),
        is_expert=torch.tensor(expert if expert is not None else [False] * n),
        temperature=torch.ones(n), pair_index=torch.tensor(pair if pair is not None else [-1] * n),
        preferred=torch.tensor(preferred if preferred is not None else [False] * n),
        versions=torch.zeros(n, dtype=torch.long),
    )


def out_of(logp, **kw) -> PolicyOut:
    lp = torch.tensor(logp, dtype=torch.float32, requires_grad=True)
    return PolicyOut(logp=lp, entropy=torch.zeros_like(lp), **kw)


def test_masked_mean_and_kl_k3():
    x = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
    m = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.bool)
    assert masked_mean(x, m).item() == pytest.approx(3.5)
    assert kl_k3(torch.tensor(0.0), torch.tensor(LN(2))).item() == pytest.approx(1 - LN(2), abs=1e-6)
    assert kl_k3(torch.tensor(-1.3), torch.tensor(-1.3)).item() == pytest.approx(0.0)


def test_grpo_on_policy_is_token_level_policy_gradient():
    # row 0: A=1 over 2 tokens; row 1: A=-0.5 over 3 tokens -> loss = -(2·1 + 3·(-0.5))/5 = -0.1
    b = batch_of([[1, 1, 0], [1, 1, 1]], adv=[1.0, -0.5])
    out = out_of([[-1.0, -2.0, -9.0], [-0.5, -0.7, -0.1]])
    res = GRPOLoss(TrainerConfig(), "none")(out, b)
    assert res.loss.item() == pytest.approx(-0.1)
    res.loss.backward()
    # d/dlogp = -A/5 on trained tokens, 0 on the masked one
    assert out.logp.grad.flatten().tolist() == pytest.approx([-0.2, -0.2, 0.0, 0.1, 0.1, 0.1])
    assert res.parts["clip_frac"] == 0.0


def test_whitening_scales_the_rl_rows_only():
    # rows 0-2: lone answers' small, lagging r - baseline; row 3: a demonstration; row 4: nothing trained
    b = batch_of([[1, 1], [1, 0], [1, 1], [1, 1], [0, 0]], adv=[0.01, 0.03, 0.05, 0.0, 7.0],
                 expert=[False, False, False, True, False])
    w = whiten_advantages(b).advantages.tolist()
    sd = (sum((x - 0.03) ** 2 for x in (0.01, 0.03, 0.05)) / 3) ** 0.5
    assert w[:3] == pytest.approx([-0.02 / sd, 0.0, 0.02 / sd], abs=1e-4)
    assert w[3:] == [0.0, 7.0]  # the demonstration and the untrained row keep theirs
    assert b.advantages.tolist()[:3] == pytest.approx([0.01, 0.03, 0.05])  # the input batch is not changed
    one = batch_of([[1, 1], [1, 1]], adv=[0.2, 0.0], expert=[False, True])
    assert whiten_advantages(one) is one  # a single RL row has no spread to scale by
    res = GRPOLoss(TrainerConfig(), "none")(out_of([[-1.0, -1.0]] * 5), whiten_advantages(b))
    assert res.parts["adv_mean"] == pytest.approx(0.0, abs=1e-4)  # the loss reports what it trained on
    assert res.parts["adv_std"] == pytest.approx(0.75 ** 0.5, abs=1e-3)  # rows 0-3: ±1.22, 0, 0


def test_advantage_norm_is_refused_where_no_loss_reads_it():
    with pytest.raises(ValueError, match="advantage_norm 'batch'.*loss 'ppo'"):
        TrainerConfig(loss="ppo", advantage_norm="batch")
    assert TrainerConfig(loss="mix", advantage_norm="batch").advantage_norm == "batch"


def test_clipped_surrogate_by_hand():
    # r = 1.5 (A=+1) -> clipped 1.2; r = 0.5 (A=-1) -> min(-0.5, -0.8) = -0.8; r = 0.9 (A=+1) -> 0.9
    logp = torch.tensor([[LN(1.5), LN(0.5), LN(0.9)]])
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    mask = torch.ones((1, 3), dtype=torch.bool)
    loss, parts = policy_gradient(logp, torch.zeros((1, 3)), torch.zeros((1, 3)), adv, mask, "none", 0.2, 0.2, 2.0)
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 0.9) / 3)
    assert parts["clip_frac"] == pytest.approx(2 / 3)


def test_truncated_importance_sampling_by_hand():
    # prox = current = 0; behaviour 0.8 -> w = 1.25; behaviour 0.25 -> w = 4, capped at 2
    behav = torch.tensor([[LN(0.8), LN(0.25)]])
    mask = torch.ones((1, 2), dtype=torch.bool)
    adv = torch.ones((1, 2))
    loss, parts = policy_gradient(torch.zeros((1, 2)), torch.zeros((1, 2)), behav, adv, mask, "tis", 0.2, 0.2, 2.0)
    assert loss.item() == pytest.approx(-(1.25 + 2.0) / 2)
    assert parts["is_truncated_frac"] == pytest.approx(0.5)
    assert parts["is_weight"] == pytest.approx(1.625)


def test_decoupled_ppo_weights_the_clipped_objective():
    # r = π/π_prox = 1.5 clipped to 1.2 (A=1), behaviour weight π_prox/π_behav = 0.5 -> -0.6
    logp = torch.tensor([[LN(1.5) + LN(0.5)]])
    prox = torch.tensor([[LN(0.5)]])
    behav = torch.tensor([[0.0]])
    loss, parts = policy_gradient(logp, prox, behav, torch.ones((1, 1)), torch.ones((1, 1), dtype=torch.bool),
                                  "decoupled", 0.2, 0.2, 2.0)
    assert loss.item() == pytest.approx(-0.6)
    assert parts["clip_frac"] == 1.0


def test_off_policy_defaults_follow_eta():
    assert resolve_off_policy(TrainerConfig(), 0) == "none"
    assert resolve_off_policy(TrainerConfig(), 2) == "decoupled"
    assert resolve_off_policy(TrainerConfig(off_policy="tis"), 0) == "tis"
    assert make_loss(TrainerConfig(loss="ppo"), 1).off_policy == "decoupled"


def test_grpo_kl_term_uses_the_reference():
    b = batch_of([[1]], adv=[0.0])
    out = out_of([[0.0]], ref_logp=torch.tensor([[LN(2)]]))
    res = GRPOLoss(TrainerConfig(kl_coef=0.5), "none")(out, b)
    assert res.parts["kl_ref"] == pytest.approx(1 - LN(2), abs=1e-6)
    assert res.loss.item() == pytest.approx(0.5 * (1 - LN(2)), abs=1e-6)


def test_sft_is_token_mean_nll():
    b = batch_of([[1, 1, 0]])
    res = SFTLoss(TrainerConfig(), "none")(out_of([[LN(0.5), LN(0.25), -50.0]]), b)
    assert res.loss.item() == pytest.approx((LN(2) + LN(4)) / 2)


def test_mix_weights_grpo_and_sft_by_mu():
    # expert row: nll = ln 2; usual row: A = 2, r = 1 -> grpo = -2; μ = 0.25
    b = batch_of([[1], [1]], adv=[0.0, 2.0], expert=[True, False])
    res = MIXLoss(TrainerConfig(mix_mu=0.25), "none")(out_of([[LN(0.5)], [-0.3]]), b)
    assert res.loss.item() == pytest.approx(0.75 * -2.0 + 0.25 * LN(2), abs=1e-6)
    assert res.parts["expert_rows"] == 1.0


def test_dpo_by_hand():
    # chosen: π = -1, ref = -2; rejected: π = -3, ref = -2 -> margin 2 -> -log σ(0.1·2)
    b = batch_of([[1, 1], [1, 1], [1, 0]], pair=[0, 0, -1], preferred=[True, False, False])
    out = out_of([[-0.5, -0.5], [-1.0, -2.0], [-7.0, 0.0]], ref_logp=torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [0.0, 0.0]]))
    res = DPOLoss(TrainerConfig(dpo_beta=0.1), "none")(out, b)
    assert res.loss.item() == pytest.approx(math.log1p(math.exp(-0.2)), abs=1e-6)
    assert res.parts["dpo_pairs"] == 1.0 and res.parts["dpo_accuracy"] == 1.0


def test_gae_by_hand():
    values = torch.tensor([[0.5, 0.2, 0.1, 0.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    response = torch.tensor([[True, True, True, False]])
    adv, ret = gae(rewards, values, response, gamma=1.0, lam=0.5)
    # t2: 1 - 0.1 = 0.9; t1: 0.1 - 0.2 + 0.5·0.9 = 0.35; t0: 0.2 - 0.5 + 0.5·0.35 = -0.125
    assert adv.tolist()[0] == pytest.approx([-0.125, 0.35, 0.9, 0.0])
    assert ret.tolist()[0][:3] == pytest.approx([0.375, 0.55, 1.0])


def test_ppo_total_by_hand():
    loss = PPOLoss(TrainerConfig(gamma=1.0, gae_lambda=0.5, vf_coef=0.5, kl_coef=0.1), "none")
    loss.whiten_advantages = False
    b = batch_of([[1, 1, 1, 0]], rewards=[1.0])
    values = torch.tensor([[0.5, 0.2, 0.1, 0.0]], requires_grad=True)
    out = out_of([[-1.0, -1.0, -1.0, 0.0]], values=values, ref_logp=torch.tensor([[-1.0, -1.0, -1.0, 0.0]]))
    res = loss(out, b)
    pg = -(-0.125 + 0.35 + 0.9) / 3
    vf = 0.5 * ((0.5 - 0.375) ** 2 + (0.2 - 0.55) ** 2 + (0.1 - 1.0) ** 2) / 3
    assert res.parts["pg"] == pytest.approx(pg)
    assert res.parts["value_loss"] == pytest.approx(vf)
    assert res.loss.item() == pytest.approx(pg + 0.5 * vf)


def _group(prompt_ids, *samples, **kw) -> ExperienceGroup:
    return ExperienceGroup(task_id="t", explorer_id="x", prompt_ids=prompt_ids, samples=list(samples), **kw)


def test_collate_aligns_response_tokens():
    e = Experience(response_ids=[7, 8, 9], logprobs=[-1.0, -2.0, -3.0], loss_mask=[True, False, True],
                   model_version=0, advantage=0.5, metadata={"logprob_temperature": "0.7"})
    short = Experience(response_ids=[4], logprobs=[-0.5], loss_mask=[True], model_version=0)
    g, demo = _group([5, 6], e), _group([5], short)
    b = collate([Row(g, e), Row(demo, short, expert=True)], pad_id=0, max_len=64)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 4, 0, 0, 0]]
    assert b.targets.tolist()[0] == [6, 7, 8, 9]
    assert b.mask.tolist() == [[False, True, False, True], [True, False, False, False]]
    assert b.response.tolist()[0] == [False, True, True, True]
    assert b.behav_logp.tolist()[0] == [0.0, -1.0, -2.0, -3.0]
    assert b.temperature.tolist() == pytest.approx([0.7, 1.0])
    assert b.is_expert.tolist() == [False, True] and b.advantages.tolist() == [0.5, 0.0]
    # too long for the context: the prompt stays, the response tail goes
    cut = collate([Row(g, e)], pad_id=0, max_len=4)
    assert cut.input_ids.tolist() == [[5, 6, 7, 8]] and cut.mask.tolist() == [[False, True, False]]


def test_recomputed_logprobs_match_generation_at_the_same_weights():
    """The trainer's recompute (right-padded, temperature from metadata) equals what `generate`
    sampled from (left-padded, as the explorer does): the alignment every ratio depends on."""
    from rftbus.ground.models.config import ModelConfig
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.trainer.policy import PolicyWithValue, token_logp_entropy

    tok = load_tokenizer(ModelConfig())
    model = load_policy(ModelConfig(), tok).eval()
    prompts = ["12+7=", "3+45="]
    enc = tok(prompts, return_tensors="pt", padding=True)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=0.7, max_new_tokens=6, return_dict_in_generate=True,
                             output_scores=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    new = out.sequences[:, enc["input_ids"].shape[1]:]
    lps = torch.log_softmax(torch.stack(out.scores, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    exps = []
    for i, p in enumerate(prompts):
        ids = new[i].tolist()
        if tok.eos_token_id in ids:
            ids = ids[: ids.index(tok.eos_token_id) + 1]
        e = Experience(response_ids=ids, logprobs=lps[i, : len(ids)].tolist(), loss_mask=[True] * len(ids),
                       model_version=0, metadata={"logprob_temperature": "0.7"})
        exps.append(Row(_group(tok(p)["input_ids"], e), e))
    b = collate(exps, tok.pad_token_id, 64)
    with torch.no_grad():
        logits, _ = PolicyWithValue(model, value_head=False)(b.input_ids, b.attention_mask)
        logp, _ = token_logp_entropy(logits, b)
    assert int(b.mask.sum()) == sum(len(r.sample.response_ids) for r in exps)
    assert torch.allclose(logp[b.mask], b.behav_logp[b.mask], atol=1e-4), (logp[b.mask], b.behav_logp[b.mask])


def test_evaluate_scores_greedy_generations_on_the_eval_split():
    from rftbus.ground.models.config import ModelConfig
    from rftbus.ground.models.prompt import PromptFormat
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.tasksets import get_taskset
    from rftbus.trainer.evaluate import evaluate

    tok = load_tokenizer(ModelConfig())
    model = load_policy(ModelConfig(), tok)
    ts = get_taskset("addition")
    res = evaluate(model, PromptFormat.for_model(tok, ModelConfig()), ts, 6, max_new_tokens=4)
    assert res["n"] == 6.0 and 0.0 <= res["mean_reward"] <= 1.0 and "mean_exact" in res

    class Oracle:  # a taskset whose scorer checks the text generated: a perfect answer scores 1
        name = "oracle"

        def tasks(self, split, n, seed=0):
            assert split == "eval"
            return ts.tasks(split, n, seed)

        def score(self, response, answer):
            return {"reward": 1.0 if response == greedy[0] else 0.0}

    enc = tok([next(iter(ts.tasks("eval", 1))).prompt], return_tensors="pt")
    with torch.no_grad():
        g = model.generate(**enc, do_sample=False, max_new_tokens=4, pad_token_id=tok.pad_token_id)
    greedy = [tok.decode(g[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)]
    assert evaluate(model, PromptFormat.for_model(tok, ModelConfig()), Oracle(), 1, max_new_tokens=4)["mean_reward"] == 1.0
