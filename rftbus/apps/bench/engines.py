"""`rftbus bench engines CONFIG`: the rollout engines side by side on the same prompts, same machine, one run.

Each engine is its own worker process (rftbus/apps/bench/engine_worker.py) under the Python it needs (vLLM's
environment, `explorer.engine.python`, for vllm); both are loaded first, then asked for one batch each in turn
(ABAB...), so a noisy neighbour slows both alike. A batch is GROUPS prompts of the config's taskset x N answers
(64 by default: a step of the real-times run), with the config's sampling. Reports tokens/s and seconds per batch,
the ratio, and a PNG."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import typer

from rftbus.apps.bench.context import state
from rftbus.ground.figures import save_png


def _worker(python: str, config: Path, kind: str, groups: int, n: int, tokens: int, threads: int,
            lora: bool) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([python, "-m", "rftbus.apps.bench.engine_worker", str(config), kind, str(groups), str(n),
                             str(tokens), "lora" if lora else "base"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)


def _line(p: subprocess.Popen, kind: str) -> dict:
    assert p.stdout is not None
    for raw in p.stdout:
        if raw.startswith("{"):
            return json.loads(raw)
    raise typer.BadParameter(f"the {kind} engine's worker stopped (exit {p.wait()}): run it alone to see why")


def engines(
    ctx: typer.Context,
    kinds: str = typer.Option("transformers,vllm", "--engines", help="Engines to compare, comma-separated."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Batches per engine, taken in turn."),
    groups: int = typer.Option(8, "--groups", min=1, help="Prompts per batch."),
    n: int = typer.Option(8, "--n", min=1, help="Answers per prompt."),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens", min=1),
    threads: int = typer.Option(1, "--threads", min=1, help="Threads each engine's worker gets (an explorer: 1)."),
    lora: bool = typer.Option(True, "--lora/--base", help="With trainer.lora: serve an adapter version (as explorers "
                              "do after the first step), or the base weights."),
    plot: Path | None = typer.Option(None, "--plot", help="Write a PNG of tokens/s per round."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Tokens/s and seconds per batch of each engine on the same prompts, alternating batches."""
    st = state(ctx)
    cfg = st.config()
    if st.config_path is None:
        raise typer.BadParameter("bench engines needs a config (--config): the model, taskset and sampling")
    names = [k.strip() for k in kinds.split(",") if k.strip()]
    procs, loads = {}, {}
    for kind in names:  # loaded one after the other (a load is CPU-bound), then kept for the rounds
        python = (cfg.explorer.engine.python if kind == "vllm" else None) or sys.executable
        with st.err.status(f"loading the {kind} engine ..."):
            procs[kind] = _worker(python, st.config_path, kind, groups, n, max_new_tokens, threads, lora)
            loads[kind] = _line(procs[kind], kind)["load_s"]
    runs: dict[str, list[dict]] = {k: [] for k in names}
    try:
        for r in range(rounds):
            for kind, p in procs.items():
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
                runs[kind].append(_line(p, kind))
                st.err.print(f"round {r}: {kind} {runs[kind][-1]['tokens_per_s']} tokens/s", highlight=False)
    finally:
        for p in procs.values():
            if p.stdin:
                p.stdin.close()
            p.wait(timeout=120)
    out: dict = {"model": cfg.model.path or cfg.model.name, "answers_per_batch": groups * n,
                 "max_new_tokens": max_new_tokens, "threads": threads, "rounds": rounds,
                 "lora": bool(lora and cfg.trainer.lora), "engines": {}}
    for kind, rs in runs.items():
        out["engines"][kind] = {"load_s": loads[kind],
                                "tokens_per_s": round(statistics.median(x["tokens_per_s"] for x in rs), 1),
                                "seconds_per_batch": round(statistics.median(x["seconds"] for x in rs), 2),
                                "rounds": rs}
    if len(names) == 2:
        a, b = names
        out[f"{b}_over_{a}_tokens_per_s"] = round(out["engines"][b]["tokens_per_s"] / out["engines"][a]["tokens_per_s"], 3)
    if plot is not None:
        _plot(out, plot)
    if as_json:
        st.console.out(json.dumps(out), highlight=False)
        return
    for kind, e in out["engines"].items():
        st.console.print(f"{kind}: {e['tokens_per_s']} tokens/s, {e['seconds_per_batch']} s per {groups * n}-answer "
                         f"batch (median of {rounds}), loaded in {e['load_s']} s", highlight=False)


def _plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for kind, e in out["engines"].items():
        ax.plot([r["round"] for r in e["rounds"]], [r["tokens_per_s"] for r in e["rounds"]], "o-", label=kind)
    ax.set_xlabel("round (engines alternate)")
    ax.set_ylabel("tokens / s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{out['answers_per_batch']} answers a batch, {out['threads']} thread(s) each"
                 + (", a LoRA version" if out["lora"] else ", base weights"))
    ax.legend()
    fig.tight_layout()
    save_png(fig, path, dpi=100)
