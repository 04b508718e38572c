"""`rftbus bench prefill`: the explorer's generate call with a shared prompt read once against every row's read,
alternated in one process on one engine, for groups of the config's shape (rl.group_size answers to each of
explorer.batch_tasks taskset prompts, the config's sampling), on the explorer's thread count."""

from __future__ import annotations

import json
import statistics
import time

import typer

from rftbus.apps.bench.context import state


def prefill(
    ctx: typer.Context,
    reps: int = typer.Option(3, "--reps", min=1, help="Calls timed per way (alternated)."),
    threads: int = typer.Option(1, "--threads", min=1, help="torch threads (an explorer's, by default one)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Seconds per explorer generate call: each shared prompt read once vs every row's prompt read."""
    import torch

    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.producers.engines.transformers import TransformersEngine
    from rftbus.ground.tasksets.data import open_taskset

    cfg = state(ctx).config()
    torch.set_num_threads(threads)
    eng = TransformersEngine(cfg, load_tokenizer(cfg.model))
    groups = max(1, cfg.explorer.batch_tasks)
    prompts = [eng.prompt.of_task(t) for t in open_taskset(cfg.taskset).tasks("train", groups)
               for _ in range(cfg.rl.group_size)]
    shared = eng.shared_prefill
    ways = {"shared_prompt": shared, "every_row": lambda ids, mask: None}
    times: dict[str, list[float]] = {k: [] for k in ways}
    err = state(ctx).err
    eng.generate(prompts, cfg.explorer.sampling)  # warm-up
    try:
        for r in range(reps):
            for name, fn in ways.items():
                eng.shared_prefill = fn  # type: ignore[method-assign]  # the bench's switch, never a runtime path
                t0 = time.perf_counter()
                eng.generate(prompts, cfg.explorer.sampling)
                times[name].append(time.perf_counter() - t0)
                err.print(f"rep {r + 1}/{reps} {name}: {times[name][-1]:.2f} s")
    finally:
        eng.shared_prefill = shared  # type: ignore[method-assign]
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    out = {"model": cfg.model.name or cfg.model.path or "tiny", "groups": groups, "answers": len(prompts),
           "prompt_tokens": max(len(p) for p in prompts), "new_tokens": cfg.explorer.sampling.max_new_tokens,
           "threads": threads, **{f"{k}_s": v for k, v in med.items()},
           "runs": {k: [round(x, 3) for x in v] for k, v in times.items()},
           "speedup": round(med["every_row"] / med["shared_prompt"], 3)}
    if as_json:
        print(json.dumps(out))
    else:
        state(ctx).console.print(out)
