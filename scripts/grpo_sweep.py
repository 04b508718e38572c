"""Single-process GRPO recipe sweep for the toy tasks: research, not part of the loop.

The same engine sampling, taskset reward, streams' GRPO advantages, `collate` and `train_step` as the
trainer, but on-policy, in one process, with plain torch AdamW and no Kafka, so one recipe costs a
minute or two instead of a 15-minute `rftbus run`. docs/BENCHMARKS.md at 7ce4067 ("Pure GRPO on addition: where
it is stuck") cites its runs. Examples (run from the repository root with the project's venv):

    python scripts/grpo_sweep.py --sft-steps 1600 --steps 0 --out .rftbus/sweep --tag sft   # SFT curve + checkpoints
    python scripts/grpo_sweep.py --init .rftbus/sweep/sft-sft-1100.pt --lr 3e-4 --out .rftbus/sweep --tag w1100
    python scripts/grpo_sweep.py --adv position --path <exported HF folder> --out .rftbus/sweep --tag pos
    python scripts/grpo_sweep.py --taskset reverse --lr 1e-3 --out .rftbus/sweep --tag rev
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import deque
from pathlib import Path

import torch

from rftbus.ground.config import Config
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.producers.engines.transformers import TransformersEngine
from rftbus.producers.experience import demonstration
from rftbus.ground.models.prompt import prompt_format
from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.apps.simulate.graders import rating_of
from rftbus.streams.advantages import make_estimator
from rftbus.ground.tasksets import get_taskset
from rftbus.trainer.batch import collate, rows_of, whiten_advantages
from rftbus.ground.config.trainer import TrainerConfig
from rftbus.trainer.evaluate import evaluate
from rftbus.trainer.losses import make_loss
from rftbus.trainer.losses.base import LossResult
from rftbus.trainer.losses.terms import masked_mean, num, policy_gradient
from rftbus.trainer.policy import PolicyWithValue
from rftbus.trainer.step import train_step


class TorchEngine:
    """What train_step needs of a DeepSpeed engine, over plain AdamW with gradient clipping at 1."""

    def __init__(self, policy: PolicyWithValue, lr: float):
        self.policy, self.norm = policy, 0.0
        self.opt = torch.optim.AdamW(policy.parameters(), lr=lr)

    def __call__(self, ids, attn):
        return self.policy(ids, attn)

    def backward(self, loss, scale_wrt_gas: bool = True):
        self.opt.zero_grad()
        loss.backward()
        self.norm = float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0))

    def step(self):
        self.opt.step()

    def get_global_grad_norm(self):
        return self.norm

    def get_lr(self):
        return [g["lr"] for g in self.opt.param_groups]


def step_rewards(tok, ids: list[int], answer: str) -> list[float]:
    """Addition's digit credit spread over tokens: 0.5/width per right digit (left-aligned), and the
    exact bonus 0.5 on the EOS that ends an exact answer; they sum to the taskset's reward."""
    eos = tok.eos_token_id
    text = [tok.convert_ids_to_tokens(i) for i in ids if i != eos]
    pred, width = "".join(text), max(len(text), len(answer), 1)
    return [(0.5 if pred == answer else 0.0) if i == eos else
            (0.5 / width if j < len(answer) and text[j] == answer[j] else 0.0) for j, i in enumerate(ids)]


def token_advantages(rewards: list[list[float]], mode: str) -> list[list[float]]:
    """Per-token advantages = the sum of normalised step rewards from that token on.

    process: DeepSeekMath's process-supervised GRPO (normalise by all step rewards of the group);
    position: a baseline per answer position over the samples that reach it.
    """
    if mode == "process":
        flat = [x for r in rewards for x in r]
        m = sum(flat) / len(flat)
        sd = (sum((x - m) ** 2 for x in flat) / len(flat)) ** 0.5 + 1e-6
        normed = [[(x - m) / sd for x in r] for r in rewards]
    else:
        normed = [[0.0] * len(r) for r in rewards]
        for j in range(max(len(r) for r in rewards)):
            col = [r[j] for r in rewards if len(r) > j]
            m = sum(col) / len(col)
            sd = (sum((x - m) ** 2 for x in col) / len(col)) ** 0.5
            for k, r in enumerate(rewards):
                if len(r) > j and sd > 1e-5:
                    normed[k][j] = (r[j] - m) / sd
    return [[sum(n[t:]) for t in range(len(n))] for n in normed]


class TokenGRPO:
    """GRPO's clipped surrogate with a per-token advantage (on-policy)."""

    name = "grpo"

    def __init__(self, advantages: list[list[float]], clip: float, entropy_coef: float = 0.0):
        self.advantages, self.clip, self.entropy_coef = advantages, clip, entropy_coef

    def __call__(self, out, batch):
        adv = torch.zeros_like(out.logp)
        for i, a in enumerate(self.advantages):
            cols = batch.mask[i].nonzero().flatten()
            adv[i, cols] = torch.tensor(a[: len(cols)], dtype=adv.dtype)
        pg, parts = policy_gradient(out.logp, out.proximal(), batch.behav_logp, adv, batch.mask, "none",
                                    self.clip, self.clip, 2.0)
        entropy = masked_mean(out.entropy, batch.mask)
        parts["entropy"] = num(entropy)
        return LossResult(pg - self.entropy_coef * entropy, parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for checkpoints and the run's JSON")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--taskset", default="addition")
    ap.add_argument("--path", help="start from a Hugging Face folder (e.g. `rftbus export`)")
    ap.add_argument("--init", type=Path, help="start from a state dict this script saved")
    ap.add_argument("--sft-steps", type=int, default=0, help="SFT on the taskset's answers first (64 per step, lr 2e-3)")
    ap.add_argument("--steps", type=int, default=600, help="GRPO steps")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--adv", choices=["grpo", "process", "position"], default="grpo")
    ap.add_argument("--entropy", type=float, default=0.0, help="entropy bonus coefficient")
    ap.add_argument("--kl-cov", type=float, default=0.0, help="trainer.kl_cov_ratio")
    ap.add_argument("--kl-cov-coef", type=float, default=1.0, help="trainer.kl_cov_coef")
    ap.add_argument("--entropy-target", type=float, default=None, help="adaptive entropy control: target nats/token")
    ap.add_argument("--entropy-step", type=float, default=0.002, help="adaptive entropy control: coefficient change per step")
    ap.add_argument("--entropy-max", type=float, default=0.05, help="adaptive entropy control: coefficient cap")
    ap.add_argument("--hidden", type=int, default=128, help="tiny model width (from scratch only)")
    ap.add_argument("--layers", type=int, default=2, help="tiny model depth (from scratch only)")
    ap.add_argument("--clip-high", type=float, default=0.2, help="ratio clip 1 + clip_high (DAPO's clip-higher: 0.28)")
    ap.add_argument("--estimator", choices=["grpo", "drgrpo"], default="grpo", help="streams.advantage")
    ap.add_argument("--epochs", type=int, default=1, help="optimizer steps per batch (trainer.update_epochs)")
    ap.add_argument("--fill", action="store_true",
                    help="sample until B groups survive the zero-variance filter, as the loop's trainer waits for B")
    ap.add_argument("--warm-steps", type=int, default=0, help="curriculum: the first K GRPO steps on --warm-length")
    ap.add_argument("--warm-length", type=int, default=2, help="curriculum: the task length of those steps")
    ap.add_argument("--warm-tasks", type=int, default=40, help="curriculum: distinct train tasks of that length")
    ap.add_argument("--singleton", action="store_true",
                    help="live traffic: B lone answers per step to B tasks, advantage r - baseline (task_or_class)")
    ap.add_argument("--loss", choices=["grpo", "ppo"], default="grpo", help="trainer.loss (ppo: critic, GAE)")
    ap.add_argument("--gae-lambda", type=float, default=0.95)
    ap.add_argument("--rating-share", type=float, default=0.0,
                    help="singleton: this share of rewards arrive as the graders' 1-5 ratings (back to 0..1)")
    ap.add_argument("--rating-round", choices=["half_up", "even"], default="half_up",
                    help="even: the graders' ratings before the fix (Python's round: 0.125 rated 1, 0.375 rated 3)")
    ap.add_argument("--lag", type=int, default=0, help="singleton: grades arrive this many steps after the answer "
                    "(live feedback's delay; the loss then corrects off-policy as the trainer does at η > 0)")
    ap.add_argument("--adv-norm", choices=["none", "batch"], default="none", help="trainer.advantage_norm")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    cfg = Config.model_validate({"model": {"path": a.path, "tiny": {"hidden_size": a.hidden, "num_hidden_layers": a.layers,
                                                                     "intermediate_size": 2 * a.hidden}},
                                 "explorer": {"sampling": {"temperature": a.temperature, "max_new_tokens": 6}}})
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    lm = load_policy(cfg.model, tok)
    if a.init:
        lm.load_state_dict(torch.load(a.init))
    ts = get_taskset(a.taskset)
    train = list(ts.tasks("train", 3000, seed=0))
    warm = [] if not a.warm_steps else list(
        get_taskset(a.taskset, length=a.warm_length).tasks("train", a.warm_tasks, seed=0))
    rollout = TransformersEngine(cfg, tok, model=lm)  # the same module: on-policy
    policy = PolicyWithValue(lm, a.loss == "ppo")
    hist: list[dict] = []

    def ev(step: int, phase: str) -> None:
        r = evaluate(lm, fmt, ts, 128, max_new_tokens=6)
        lm.train()
        live = sum(sampled) / len(sampled) if sampled else None
        sampled.clear()
        hist.append({"phase": phase, "step": step, "reward": r["mean_reward"], "exact": r.get("mean_exact"), "sampled": live})
        print(f"{a.tag} {phase} {step}: eval {r['mean_reward']:.3f} exact {r.get('mean_exact', 0):.3f}"
              + (f" sampled {live:.3f}" if live is not None else ""), flush=True)

    if a.sft_steps:
        eng, sft = TorchEngine(policy, 2e-3), make_loss(TrainerConfig(loss="sft"), 0)
        for k in range(1, a.sft_steps + 1):
            demos = [row for t in (rng.choice(train) for _ in range(64))
                     for row in rows_of(demonstration(prompt_ids=fmt.task(t.prompt), prompt_text=t.prompt,
                                                      text=t.answer, fmt=fmt, task_id=t.task_id,
                                                      producer_id="sweep", metadata={}), expert=True)]
            train_step(eng, sft, collate(demos, tok.pad_token_id, 64))
            if k % a.eval_every == 0:
                ev(k, "sft")
                torch.save(lm.state_dict(), a.out / f"sft-{a.tag}-{k}.pt")
    eng, est = TorchEngine(policy, a.lr), make_estimator(a.estimator, 1e-6)
    grpo = make_loss(TrainerConfig(loss=a.loss, entropy_coef=a.entropy, clip_high=a.clip_high, gae_lambda=a.gae_lambda,
                                   kl_coef=0.0, kl_cov_ratio=a.kl_cov, kl_cov_coef=a.kl_cov_coef), a.lag)
    task_rate: dict[str, float] = {}
    graded: deque[list] = deque()  # singleton: answers waiting for their grades (--lag steps)
    sampled: list[float] = []  # singleton: the served answers' scores (the live reward), since the last eval
    class_rate = [0.0, False]
    ev(0, "grpo")
    t0, zero, groups = time.time(), 0, 0
    ent_hist: list[float] = []
    last = (0, 0)
    for step in range(1, a.steps + 1):
        exps, tok_adv = [], []
        lm.eval()
        kept = 0
        while a.singleton and not kept:
            tasks = [rng.choice(train) for _ in range(a.B)]
            prompts = [fmt.task(t.prompt) for t in tasks]
            comps = rollout.generate(prompts, cfg.explorer.sampling)
            graded.append([])
            for t, p, c in zip(tasks, prompts, comps):
                r = ts.score(c.text, t.answer)["reward"]
                sampled.append(r)
                rated = rating_of(r) if a.rating_round == "half_up" else 1 + round(4 * r)
                graded[-1].append((t, p, c, (rated - 1) / 4 if rng.random() < a.rating_share else r))
            if len(graded) <= a.lag:  # the grades arrive a.lag steps later
                continue
            for t, p, c, r in graded.popleft():
                b = task_rate.get(t.task_id, class_rate[0] if class_rate[1] else 0.5)
                task_rate[t.task_id] = r if t.task_id not in task_rate else 0.8 * task_rate[t.task_id] + 0.2 * r
                class_rate[:] = [0.98 * class_rate[0] + 0.02 * r if class_rate[1] else r, True]
                exps += rows_of(ExperienceGroup(task_id=t.task_id, explorer_id="sweep", prompt_ids=p, samples=[
                    Experience(response_ids=c.response_ids, logprobs=c.logprobs, loss_mask=[True] * len(c.response_ids),
                               model_version=0, reward=r, advantage=r - b, metadata=dict(c.metadata))]))
            kept = groups = len(exps)
        while not a.singleton and kept < a.B and (a.fill or groups < step * a.B):
            t = rng.choice(warm if step <= a.warm_steps else train)
            p = fmt.task(t.prompt)
            comps = rollout.generate([p] * a.n, cfg.explorer.sampling)
            rewards = [ts.score(c.text, t.answer)["reward"] for c in comps]
            groups += 1
            if max(rewards) - min(rewards) < 1e-9:  # streams drop zero-variance groups
                zero += 1
                continue
            kept += 1
            if a.adv != "grpo":
                tok_adv += token_advantages([step_rewards(tok, c.response_ids, t.answer) for c in comps], a.adv)
            group = ExperienceGroup(task_id=t.task_id, explorer_id="sweep", prompt_ids=p, samples=[
                Experience(response_ids=c.response_ids, logprobs=c.logprobs, loss_mask=[True] * len(c.response_ids),
                           model_version=0, reward=r, advantage=adv, metadata=dict(c.metadata))
                for c, r, adv in zip(comps, rewards, est.advantages(rewards))])
            exps += rows_of(group)
        lm.train()
        if exps:
            loss = grpo if a.adv == "grpo" else TokenGRPO(tok_adv, 0.2, a.entropy)
            batch = collate(exps, tok.pad_token_id, 64)
            parts = train_step(eng, loss, whiten_advantages(batch) if a.adv_norm == "batch" else batch,
                               update_epochs=a.epochs)
            if a.entropy_target is not None:
                c = grpo.cfg.entropy_coef + (a.entropy_step if parts["entropy"] < a.entropy_target else -a.entropy_step)
                grpo.cfg.entropy_coef = min(max(c, 0.0), a.entropy_max)
            ent_hist.append(parts.get("entropy", 0.0))
        if step % a.eval_every == 0 or step == a.steps:
            ev(step, "grpo")
            print(f"  {time.time() - t0:.0f}s, zero-variance groups {zero / max(groups, 1):.2f}"
                  f" (recent {(zero - last[0]) / max(groups - last[1], 1):.2f})"
                  f" entropy {sum(ent_hist[-20:]) / max(len(ent_hist[-20:]), 1):.3f} coef {grpo.cfg.entropy_coef:.4f}", flush=True)
            last = (zero, groups)
    (a.out / f"sweep-{a.tag}.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                                           "eval": hist}, indent=1))


if __name__ == "__main__":
    main()
