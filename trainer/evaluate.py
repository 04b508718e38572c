"""Eval on a taskset's held-out split: greedy generation with the policy, scored by the taskset."""

from __future__ import annotations

import torch


@torch.no_grad()
def evaluate(model, tokenizer, taskset, n: int, max_new_tokens: int = 8, batch_size: int = 32,
             seed: int = 0) -> dict[str, float]:
    """Mean reward (and every score component) over `n` eval tasks, greedy decoding."""
    tasks = list(taskset.tasks("eval", n, seed=seed))
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    totals: dict[str, float] = {}
    try:
        for i in range(0, len(tasks), batch_size):
            chunk = tasks[i:i + batch_size]
            enc = tokenizer([t.prompt for t in chunk], return_tensors="pt", padding=True)
            out = model.generate(input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device),
                                 do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
            texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            for task, text in zip(chunk, texts):
                for k, v in taskset.score(text, task.answer or "").items():
                    totals[k] = totals.get(k, 0.0) + float(v)
    finally:
        model.train(was_training)
    count = max(len(tasks), 1)
    result = {f"mean_{k}" if k != "reward" else "mean_reward": v / count for k, v in totals.items()}
    result["n"] = float(len(tasks))
    return result
