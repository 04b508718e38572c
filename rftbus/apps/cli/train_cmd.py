"""`rftbus train`: the DeepSpeed trainer on the stream (online), replaying a recorded topic, or eval-only.

Several ranks: `rftbus train --ranks 2` runs itself under torchrun (one process per rank, gloo on
CPU); each rank reads a disjoint share of the partitions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import typer

from rftbus.apps.cli import own_metrics
from rftbus.apps.cli.context import state
from rftbus.ground.errors import RftbusError


def parse_offsets(spec: str | None) -> dict[tuple[str, int], int] | None:
    """"topic:partition:offset,..." -> {(topic, partition): offset}."""
    if not spec:
        return None
    out = {}
    for item in spec.split(","):
        try:
            topic, part, off = item.strip().rsplit(":", 2)
            out[(topic, int(part))] = int(off)
        except ValueError:
            raise RftbusError(f"--from-offsets: {item!r} is not topic:partition:offset") from None
    return out


def parse_timestamp(spec: str | None) -> int | None:
    if spec is None:
        return None
    if spec.isdigit():
        return int(spec)
    try:
        return int(datetime.fromisoformat(spec).timestamp() * 1000)
    except ValueError:
        raise RftbusError(f"--from-timestamp: {spec!r} is neither epoch milliseconds nor an ISO date") from None


def _launch_ranks(ranks: int) -> None:
    """Re-run this exact command under torchrun, one process per rank."""
    argv = list(sys.argv[1:])
    i = argv.index("--ranks") if "--ranks" in argv else None
    if i is not None:
        del argv[i:i + 2]
    else:
        argv = [a for a in argv if not a.startswith("--ranks=")]
    script = str(Path(sys.executable).parent / "rftbus")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
           str(__import__("rftbus.trainer.dist", fromlist=["free_port"]).free_port()), "--no-python", script, *argv]
    raise typer.Exit(subprocess.call(cmd))


def _eval(cfg, n: int, as_json: bool, console) -> None:
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.models.prompt import prompt_format
    from rftbus.ground.rewards import make_rewards
    from rftbus.ground.tasksets.data import open_taskset
    from rftbus.trainer.evaluate import evaluate
    from rftbus.trainer.weights_source import newest_weights

    tok = load_tokenizer(cfg.model)
    model = load_policy(cfg.model, tok)
    model, version, where = newest_weights(cfg, model)
    res = evaluate(model, prompt_format(tok, cfg.model), open_taskset(cfg.taskset), n, cfg.trainer.eval_max_new_tokens or cfg.explorer.sampling.max_new_tokens,
                   scorer=make_rewards(cfg.explorer.rewards))
    res["version"] = float(version)
    if as_json:
        console.out(json.dumps(res))
    else:
        console.print(f"eval of version {version} ({where}) on {int(res['n'])} held-out "
                      f"{cfg.taskset.name} tasks: mean reward {res['mean_reward']:.4f}")


def train(
    ctx: typer.Context,
    mode: str = typer.Option("online", "--mode", help="online | replay (train-only from recorded topics) | eval"),
    loss: str = typer.Option(None, "--loss", help="sft | grpo | ppo | mix | dpo (default: trainer.loss)"),
    from_offsets: str = typer.Option(None, "--from-offsets", help="replay: topic:partition:offset,... (fresh checkpoint dir only)"),
    from_timestamp: str = typer.Option(None, "--from-timestamp", help="replay: epoch ms or ISO time"),
    follow: bool = typer.Option(False, "--follow", help="replay: keep waiting at the end instead of stopping"),
    max_steps: int = typer.Option(None, "--max-steps", min=1, help="stop after N steps"),
    idle_exit: float = typer.Option(None, "--idle-exit", help="stop after this many seconds without a batch"),
    ranks: int = typer.Option(1, "--ranks", min=1, help="DeepSpeed ranks (processes) on this machine"),
    n_eval: int = typer.Option(None, "--n", help="eval: held-out tasks (default trainer.eval_n)"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
    metrics_port: int | None = own_metrics.port_option(),
) -> None:
    """Train on curated + expert experiences with DeepSpeed; checkpoints tie model and offsets together."""
    if mode not in ("online", "replay", "eval"):
        raise RftbusError(f"--mode must be online, replay or eval, not {mode!r}")
    if ranks > 1 and "RANK" not in os.environ:
        _launch_ranks(ranks)
    st = state(ctx)
    cfg = st.config(**{"trainer.loss": loss, "trainer.max_steps": max_steps, "trainer.idle_exit_s": idle_exit})
    if mode == "eval":
        _eval(cfg, n_eval or cfg.trainer.eval_n, as_json, st.console)
        return
    if mode == "online" and (from_offsets or from_timestamp):
        raise RftbusError("--from-offsets/--from-timestamp belong to --mode replay")
    from rftbus.trainer.loop import RunOptions, Trainer

    opts = RunOptions(mode=mode, start_offsets=parse_offsets(from_offsets),
                      start_timestamp_ms=parse_timestamp(from_timestamp),
                      until_end=mode == "replay" and not follow,
                      # replayed versions belong to the recorded run's lineage, not this one's
                      enforce_staleness=mode == "online")
    rank0 = os.environ.get("RANK", "0") == "0"
    log = (lambda line: st.err.print(line, highlight=False)) if rank0 else (lambda line: None)
    stop_metrics = own_metrics.serve_own(cfg, "trainer", None, metrics_port, log) if rank0 else None
    try:
        summary = Trainer(cfg, opts, log=log).run()
    finally:
        if stop_metrics is not None:
            stop_metrics()
    if rank0:
        if as_json:
            st.console.out(json.dumps(summary.__dict__))
        else:
            st.console.print(f"trained {summary.steps} step(s) ({summary.trained} experiences) to step "
                             f"{summary.start_step + summary.steps}, version {summary.version}; "
                             f"rejected {summary.rejected or 0}; stopped by {summary.stopped_by}")


def register(app: typer.Typer) -> None:
    app.command()(train)
