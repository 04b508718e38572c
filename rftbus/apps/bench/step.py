"""`rftbus bench step`: seconds per trainer step on a batch shaped like the config's (rl.batch_groups groups of
rl.group_size answers of max_new_tokens to the taskset's prompts, rendered by the model's chat template), with
the trainer's way now (a prompt its rows share read once, logits from the first trained position), one forward
pass per row (before the shared prompt) and logits at every position (before #43), alternated in one run on the
same engine and batch. The engine is the trainer's (DeepSpeed, the config's loss, LoRA, precision)."""

from __future__ import annotations

import json
import resource
import statistics
import time
from typing import Any

import typer

from rftbus.apps.bench.context import state


def step(
    ctx: typer.Context,
    reps: int = typer.Option(3, "--reps", min=1, help="Steps timed per variant (alternated)."),
    threads: int = typer.Option(0, "--threads", min=0, help="torch threads (0: torch's default)."),
    micro_tokens: int = typer.Option(0, "--micro-tokens", min=0, help="trainer.micro_batch_tokens for this run "
                                     "(0: the config's)."),
    only_new: bool = typer.Option(False, "--only-new", help="Time the trainer's way only (peak memory of it alone)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Trainer seconds per step: the trainer's way (shared prompts read once, logits from the first trained position)
    against one pass per row and against logits at every position, alternated on one engine and batch."""
    import torch

    import rftbus.trainer.step as S
    from rftbus.trainer.dist import prepare_env
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.ground.schemas import Experience, ExperienceGroup
    from rftbus.ground.tasksets.data import open_taskset
    from rftbus.trainer.batch import collate, rows_of
    from rftbus.trainer.engine import build_engine
    from rftbus.trainer.losses import make_loss
    from rftbus.trainer.policy import PolicyWithValue

    cfg = state(ctx).config()
    prepare_env(cfg.trainer.device)  # before deepspeed is imported, as the trainer does
    if threads:
        torch.set_num_threads(threads)
    tc, n, g = cfg.trainer, cfg.rl.group_size, cfg.rl.batch_groups
    new = cfg.explorer.sampling.max_new_tokens
    tok = load_tokenizer(cfg.model)
    fmt = prompt_format(tok, cfg.model)
    lm = load_policy(cfg.model, tok)
    lm.config.use_cache = False
    if tc.lora is not None:
        from rftbus.ground.models.lora import wrap

        lm = wrap(lm, tc.lora)
    torch.manual_seed(0)
    embeddings: Any = lm.get_input_embeddings()
    vocab = int(embeddings.num_embeddings)
    groups = []
    for task in open_taskset(cfg.taskset).tasks("train", g):
        samples = [Experience(response_ids=torch.randint(min(100, vocab // 2), min(5000, vocab), (new,)).tolist(), logprobs=[-2.0] * new,
                              loss_mask=[True] * new, model_version=0, reward=float(k % 2),
                              advantage=1.0 if k % 2 else -1.0) for k in range(n)]
        groups.append(ExperienceGroup(task_id=task.task_id, explorer_id="bench", prompt_ids=fmt.of_task(task),
                                      samples=samples, survivors=list(range(n))))
    batch = collate([r for grp in groups for r in rows_of(grp)], tok.pad_token_id, 4096)
    engine = build_engine(PolicyWithValue(lm, value_head=make_loss(tc, cfg.rl.max_staleness).needs_values), tc)
    loss = make_loss(tc, cfg.rl.max_staleness)
    first_trained, prompt_lengths = S.first_trained, S.prompt_lengths
    none = lambda response: None  # noqa: E731  (every row reads its own prompt)
    # (logits from, prompt lengths) per way: the trainer now, without the shared prompt, before #43
    variants: dict[str, tuple[Any, Any]] = {"shared_prompt": (first_trained, prompt_lengths), "one_pass": (first_trained, none),
                "every_position": (lambda b: 0, none)}
    if only_new:
        variants = {"shared_prompt": variants["shared_prompt"]}
    times: dict[str, list[float]] = {k: [] for k in variants}
    micro = micro_tokens or tc.micro_batch_tokens
    S.train_step(engine, loss, batch, update_epochs=tc.update_epochs, micro_tokens=micro)  # warm-up (allocations)
    err = state(ctx).err
    try:
        for r in range(reps):
            for name, (first_fn, lengths_fn) in variants.items():
                S.first_trained, S.prompt_lengths = first_fn, lengths_fn  # the bench's switch, never a runtime path
                t0 = time.perf_counter()
                S.train_step(engine, loss, batch, update_epochs=tc.update_epochs, micro_tokens=micro)
                times[name].append(time.perf_counter() - t0)
                err.print(f"rep {r + 1}/{reps} {name}: {times[name][-1]:.2f} s")
    finally:
        S.first_trained, S.prompt_lengths = first_trained, prompt_lengths
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    out: dict[str, object] = {"model": cfg.model.name or cfg.model.path or "tiny", "rows": batch.n_rows,
           "tokens_per_row": int(batch.input_ids.shape[1]), "first_trained_position": int(first_trained(batch)),
           "threads": torch.get_num_threads(), "lora": tc.lora.r if tc.lora else None, "micro_tokens": micro,
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
           **{f"{k}_s": v for k, v in med.items()}, "runs": {k: [round(x, 3) for x in v] for k, v in times.items()},
           "speedup": round(med["every_position"] / med["shared_prompt"], 3) if "every_position" in med else None}
    if as_json:
        print(json.dumps(out))
    else:
        state(ctx).console.print(out)
