"""Eval on a taskset's held-out split: greedy generation with the policy, scored by the configured rewards
(the same RewardSet explorers score with: a built-in taskset's own scorer is reward `taskset`).

Prompts are rendered by the model's one prompt format (models/prompt.py), exactly as explorers render them,
and a response ends at the same stop ids: eval measures the policy on the inputs it trains on.
"""

from __future__ import annotations

import torch

from rftbus.models.prompt import PromptFormat


def components(scored) -> dict[str, float]:
    """A Scored's reward and components as eval reports them: with one reward term its own components
    unprefixed (`exact`, not `taskset.exact`), with several every `term` and `term.component`."""
    comps = scored.components
    terms = [k for k in comps if "." not in k]
    if len(terms) == 1:
        prefix = terms[0] + "."
        comps = {k[len(prefix):]: v for k, v in comps.items() if k.startswith(prefix)}
    return {"reward": scored.reward, **comps}


@torch.no_grad()
def evaluate(model, fmt: PromptFormat, taskset, n: int, max_new_tokens: int = 8, batch_size: int = 32,
             seed: int = 0, scorer=None) -> dict[str, float]:
    """Mean reward (and every score component) over `n` eval tasks, greedy decoding. `scorer`: a RewardSet
    (`score(task, text)`); None scores with the taskset's own `score(text, answer)` (a built-in's)."""
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
            prompts = [fmt.of_task(t) for t in chunk]
            width = max(len(p) for p in prompts)  # left-padded, as decoder-only generation needs
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=pad, eos_token_id=fmt.stop_ids)
            for task, row in zip(chunk, out[:, width:].tolist()):
                text = fmt.decode(fmt.cut(row)[0])
                scores = components(scorer.score(task, text)) if scorer is not None else \
                    taskset.score(text, task.answer or "")
                for k, v in scores.items():
                    totals[k] = totals.get(k, 0.0) + float(v)
    finally:
        model.train(was_training)
    count = max(len(tasks), 1)
    result = {f"mean_{k}" if k != "reward" else "mean_reward": v / count for k, v in totals.items()}
    result["n"] = float(len(tasks))
    return result
