"""Eval on a taskset's held-out split: greedy generation with the policy, scored by the taskset.

Prompts are rendered by the model's one prompt format (models/prompt.py), exactly as explorers render them,
and a response ends at the same stop ids: eval measures the policy on the inputs it trains on.
"""

from __future__ import annotations

import torch

from rftbus.models.prompt import PromptFormat


@torch.no_grad()
def evaluate(model, fmt: PromptFormat, taskset, n: int, max_new_tokens: int = 8, batch_size: int = 32,
             seed: int = 0) -> dict[str, float]:
    """Mean reward (and every score component) over `n` eval tasks, greedy decoding."""
    tok = fmt.tokenizer
    tasks = list(taskset.tasks("eval", n, seed=seed))
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    totals: dict[str, float] = {}
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    try:
        for i in range(0, len(tasks), batch_size):
            chunk = tasks[i:i + batch_size]
            prompts = [fmt.task(t.prompt) for t in chunk]
            width = max(len(p) for p in prompts)  # left-padded, as decoder-only generation needs
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=pad, eos_token_id=fmt.stop_ids)
            for task, row in zip(chunk, out[:, width:].tolist()):
                text = fmt.decode(fmt.cut(row)[0])
                for k, v in taskset.score(text, task.answer or "").items():
                    totals[k] = totals.get(k, 0.0) + float(v)
    finally:
        model.train(was_training)
    count = max(len(tasks), 1)
    result = {f"mean_{k}" if k != "reward" else "mean_reward": v / count for k, v in totals.items()}
    result["n"] = float(len(tasks))
    return result
