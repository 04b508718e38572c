"""Eval on a taskset's held-out split: greedy generation with the policy, scored by the configured rewards
(the same RewardSet explorers score with: a built-in taskset's own scorer is reward `taskset`).

Prompts are rendered by the model's one prompt format (models/prompt.py), exactly as explorers render them,
and a response ends at the same stop ids: eval measures the policy on the inputs it trains on. Generation is a
transformers model's own greedy `generate`, or a rollout engine's (`run.eval_engine: explorer`) at top-k 1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.models.prompt import PromptFormat
from rftbus.ground.models.vision import image_token_of, pixel_inputs, stacked


def components(scored) -> dict[str, float]:
    """A Scored's reward and components as eval reports them: with one reward term its own components
    unprefixed (`exact`, not `taskset.exact`), with several every `term` and `term.component`."""
    comps = scored.components
    terms = [k for k in comps if "." not in k]
    if len(terms) == 1:
        prefix = terms[0] + "."
        comps = {k[len(prefix):]: v for k, v in comps.items() if k.startswith(prefix)}
    return {"reward": scored.reward, **comps}


Greedy = Callable[..., list[list[int]]]
"""(prompts, max_new_tokens, images=None) -> each prompt's greedy response ids (the format's `cut` ends them at a
stop id); `images`: per prompt, the pixel values of the images it shows (models/vision.py Pixels) or None."""


def policy_greedy(model, pad: int, stop_ids) -> Greedy:
    """Greedy decoding with a transformers model's own `generate`, left-padded, on the model's device."""

    @torch.no_grad()
    def generate(prompts: list[list[int]], max_new_tokens: int, images=None) -> list[list[int]]:
        device = next(model.parameters()).device
        seen = pixel_inputs(model, stacked(images))
        width = max(len(p) for p in prompts)  # left-padded, as decoder-only generation needs
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        was_training = model.training
        model.eval()
        try:
            token = image_token_of(model)  # (a VLM's image token is never an answer's: models/vision.py)
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=pad, eos_token_id=stop_ids, **seen,
                                 suppress_tokens=[token] if token is not None else None)
        finally:
            model.train(was_training)
        return out[:, width:].tolist()

    return generate


def engine_greedy(engine) -> Greedy:
    """Greedy decoding on a rollout engine (the explorers' kind, e.g. vLLM): top-k 1 is the most likely token."""
    greedy = SamplingConfig(temperature=1.0, top_k=1, logprobs="raw")
    def generate(prompts: list[list[int]], max_new_tokens: int, images=None) -> list[list[int]]:
        shown = {"images": images} if images else {}  # (an engine written before images takes none)
        return [c.response_ids for c in engine.generate(prompts, greedy, max_new_tokens, **shown)]
    return generate


def evaluate(model, fmt: PromptFormat, taskset, n: int, max_new_tokens: int = 8, batch_size: int = 32,
             seed: int = 0, scorer=None) -> dict[str, float]:
    """Mean reward (and every score component) over `n` eval tasks, greedy decoding. `model`: a transformers
    model or a `Greedy` (`engine_greedy`). `scorer`: a RewardSet (`score(task, text)`); None scores with the
    taskset's own `score(text, answer)` (a built-in's)."""
    tok = fmt.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    generate = policy_greedy(model, pad, fmt.stop_ids) if isinstance(model, torch.nn.Module) else model
    tasks = list(taskset.tasks("eval", n, seed=seed))
    totals: dict[str, float] = {}
    for i in range(0, len(tasks), batch_size):
        chunk = tasks[i:i + batch_size]
        shown = [fmt.vision.inputs(t.images) if t.images and fmt.vision is not None else None for t in chunk]
        rows = generate([fmt.of_task(t) for t in chunk], max_new_tokens, **({"images": shown} if any(shown) else {}))
        for task, row in zip(chunk, rows):
            text = fmt.decode(fmt.cut(row)[0])
            scores = components(scorer.score(task, text)) if scorer is not None else \
                taskset.score(text, task.answer or "")
            for k, v in scores.items():
                totals[k] = totals.get(k, 0.0) + float(v)
    count = max(len(tasks), 1)
    result = {f"mean_{k}" if k != "reward" else "mean_reward": v / count for k, v in totals.items()}
    result["n"] = float(len(tasks))
    return result
