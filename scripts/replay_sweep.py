"""Offline: SFT on corrections arriving at the live rate, each trained once (fresh) or kept and drawn again
(replay, rftbus/trainer/replay.py): research, not part of the loop. docs/BENCHMARKS.md at 7ce4067 ("Demonstration replay"; the page keeps results only)
cites its runs. The same collate, SFT loss and train_step as the trainer, plain AdamW, one process, no Kafka.
The rate: in `make demo-live` (A1) the graders corrected ~7.8 answers a second and the trainer made ~5.7
optimizer steps a second, so 1.36 corrections arrive per optimizer step. Run from the repository root:

    python scripts/replay_sweep.py --mode fresh              # 16 fresh per batch, 8 optimizer steps each
    python scripts/replay_sweep.py --mode replay --epochs 1  # the 16 newest + 64 drawn from all so far
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

from rftbus.ground.config import Config
from rftbus.ground.config.trainer import TrainerConfig
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.producers.experience import demonstration
from rftbus.ground.models.prompt import prompt_format
from rftbus.ground.tasksets import get_taskset
from rftbus.trainer.batch import collate, rows_of
from rftbus.trainer.evaluate import evaluate
from rftbus.trainer.losses import make_loss
from rftbus.trainer.policy import PolicyWithValue
from rftbus.trainer.step import train_step

sys.path.insert(0, str(Path(__file__).parent))
from grpo_sweep import TorchEngine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["fresh", "replay"], default="fresh")
    ap.add_argument("--opt-steps", type=int, default=6900, help="optimizer steps (A1: ~20 minutes)")
    ap.add_argument("--rate", type=float, default=1.36, help="corrections arriving per optimizer step")
    ap.add_argument("--fresh", type=int, default=16, help="newest corrections per batch")
    ap.add_argument("--epochs", type=int, default=8, help="optimizer steps per batch")
    ap.add_argument("--replay", type=int, default=64, help="replay: drawn again per batch")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    cfg = Config.model_validate({})
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    lm = load_policy(cfg.model, tok)
    ts = get_taskset("addition", digits=2)
    train = list(ts.tasks("train", 5000, seed=0))  # `rftbus simulate`'s default task count

    def demo(t):
        return rows_of(demonstration(prompt_ids=fmt.task(t.prompt), prompt_text=t.prompt, text=t.answer,
                                     fmt=fmt, task_id=t.task_id, producer_id="sweep", metadata={}),
                       expert=True)[0]

    arrivals = [demo(rng.choice(train)) for _ in range(int(a.rate * a.opt_steps) + 64)]
    eng, sft = TorchEngine(PolicyWithValue(lm, False), a.lr), make_loss(TrainerConfig(loss="sft"), 0)
    t0, opt, used = time.time(), 0, 0

    def ev() -> None:
        r = evaluate(lm, fmt, ts, 256, max_new_tokens=6)
        lm.train()
        print(json.dumps({"mode": a.mode, "opt": opt, "pool": used, "eval": round(r["mean_reward"], 3),
                          "exact": round(r.get("mean_exact", 0), 3), "s": round(time.time() - t0)}), flush=True)

    while opt < a.opt_steps:
        avail = int(a.rate * opt) + 16
        if a.mode == "fresh":
            if avail - used < a.fresh:  # no new corrections yet: the trainer steps on RL rows alone
                opt += a.epochs
                continue
            batch = arrivals[used:used + a.fresh]
            used += a.fresh
        else:
            used = avail
            batch = arrivals[max(0, used - a.fresh):used] + [rng.choice(arrivals[:used]) for _ in range(a.replay)]
        b = collate(batch, tok.pad_token_id, 64)
        for _ in range(a.epochs):
            train_step(eng, sft, b)
            opt += 1
            if opt % 500 == 0:
                ev()
    ev()


if __name__ == "__main__":
    main()
