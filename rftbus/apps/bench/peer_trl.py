"""The single-process peer of `rftbus bench peer`: TRL's GRPOTrainer (+ PEFT LoRA) on the same config.

Run in a process of its own (`python -m rftbus.apps.bench.peer_trl`), as a user would run a TRL script: all the
machine's cores (torch's default threads), one process generating and training in turn. It is given exactly
what `rftbus run` is given: the config's model (the same converted weights, dtype and tokenizer), its train
tasks (the rows the run publishes, rendered by the chat template as `PromptFormat` renders them), its
rewards (the explorers' RewardSet), its stop ids, and its recipe (LoRA or full weights, lr, n answers a prompt, B groups a
step, update epochs, new tokens, temperature, beta 0, clip). TRL's defaults already match the rest: token-level mean loss ("dapo",
`rftbus/trainer/losses/terms.masked_mean`), group-std scaled advantages (streams' GRPO), AdamW without weight decay,
gradient clip 1.0. The LR is constant, as rftbus trains without a schedule unless one is configured.

Eval is not run here: every optimizer step's adapter is written with the wall time it existed at, and the
bench scores them afterwards with the project's own `evaluate`, exactly as it scores rftbus's versions.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

SNAPSHOTS = "snapshots"
STEPS = "steps.jsonl"


def rows_of(cfg) -> list:
    """The train tasks `rftbus run` publishes (run/feed.train_rows), in its order."""
    from rftbus.apps.run.feed import train_rows
    from rftbus.ground.tasksets.data import open_taskset

    return [r.task for r in train_rows(cfg, open_taskset(cfg.taskset)) if r.task is not None]


def prompt_of(task, template: bool):
    """TRL's prompt column: the conversation (TRL applies the chat template with the generation prompt) or text."""
    msgs = task.messages or [{"role": "user", "content": task.prompt}]
    return msgs if template else task.prompt


def run(config: Path, out: Path, minutes: float, t0: float) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from safetensors.torch import save_file
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rftbus.ground.config import load_config
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.ground.rewards import make_rewards

    cfg = load_config(config)
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    model = load_policy(cfg.model, tok)
    tasks = rows_of(cfg)
    by_id = {t.task_id: t for t in tasks}
    scorer = make_rewards(cfg.explorer.rewards)
    data = Dataset.from_list([{"prompt": prompt_of(t, fmt.template), "task_id": t.task_id} for t in tasks])

    def reward(prompts, completions, task_id, **_columns) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [scorer.score(by_id[i], text).reward for i, text in zip(task_id, texts)]
    reward.__name__ = "rftbus_rewards"

    t = cfg.trainer
    lora = t.lora
    out.mkdir(parents=True, exist_ok=True)
    (out / SNAPSHOTS).mkdir(exist_ok=True)
    steps_log = out / STEPS
    steps_log.write_text("")
    args = GRPOConfig(
        output_dir=str(out / "hf"), report_to=[], save_strategy="no", logging_steps=1, disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(), bf16=False, seed=cfg.model.seed, max_steps=100_000,
        per_device_train_batch_size=cfg.rl.group_size * cfg.rl.batch_groups, gradient_accumulation_steps=1,
        num_generations=cfg.rl.group_size, max_completion_length=cfg.explorer.sampling.max_new_tokens,
        temperature=cfg.explorer.sampling.temperature, learning_rate=t.lr, lr_scheduler_type="constant",
        weight_decay=t.weight_decay, max_grad_norm=t.grad_clip or 1e9, beta=0.0, epsilon=t.clip_low,
        epsilon_high=t.clip_high, num_iterations=t.update_epochs, generation_kwargs={"eos_token_id": fmt.stop_ids},
    )
    deadline = t0 + minutes * 60

    class Snapshots(TrainerCallback):
        """Each step's adapter and the wall time it existed at; stop at the deadline."""

        def on_step_end(self, args, state, control, model=None, **kw):
            from peft import get_peft_model_state_dict

            seconds = time.time() - t0
            sd = get_peft_model_state_dict(model) if lora is not None else model.state_dict()
            weights = {k: v.detach().cpu().clone().contiguous() for k, v in sd.items()}
            save_file(weights, str(out / SNAPSHOTS / f"step-{state.global_step:06d}.safetensors"))
            with open(steps_log, "a") as f:
                f.write(json.dumps({"step": state.global_step, "seconds": round(seconds, 2)}) + "\n")
            print(f"trl step {state.global_step} at {seconds:.1f} s", flush=True)
            if time.time() >= deadline:
                control.should_training_stop = True
            return control

    funcs: Any = [reward]
    trainer = GRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=data, processing_class=tok,
        peft_config=LoraConfig(r=lora.r, lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft reads a float
                                lora_dropout=lora.dropout,
                               target_modules=list(lora.target_modules), task_type="CAUSAL_LM") if lora else None,
        callbacks=[Snapshots()],
    )
    print(f"trl ready at {time.time() - t0:.1f} s: {len(tasks)} prompts, torch threads {torch.get_num_threads()}",
          flush=True)
    trainer.train()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--t0", type=float, default=None, help="epoch seconds the clock starts at (default: now)")
    a = p.parse_args()
    run(a.config, a.out, a.minutes, a.t0 or time.time())


if __name__ == "__main__":
    main()
