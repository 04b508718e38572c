"""`rftbus simulate`: live agents and graders against a running `rftbus serve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from rftbus.apps.cli.context import state


def simulate(
    ctx: typer.Context,
    minutes: Optional[float] = typer.Option(None, help="stop after this long (default simulate.duration_s, "
                                            "else until Ctrl-C)"),
    agents: Optional[int] = typer.Option(None, help="concurrent agents (simulate.agents)"),
    url: Optional[str] = typer.Option(None, help="the proxy's /v1 base URL (default serve.host:serve.port)"),
    ident: str = typer.Option("sim", "--id", help="status file id"),
    summary_json: Optional[Path] = typer.Option(None, help="write the final counts and live reward here"),
    plot_dir: Optional[Path] = typer.Option(None, help="write live_reward.png here"),
) -> None:
    """Agents ask the proxy through the OpenAI SDK; graders post late, noisy, partial feedback that the
    taskset's scorer decides; the live reward of the served answers is printed per minute."""
    import time

    from rftbus.apps.simulate import live_reward
    from rftbus.apps.simulate.runner import run

    cfg = state(ctx).config(**{"simulate.url": url, "simulate.agents": agents,
                               "simulate.duration_s": minutes * 60 if minutes else None})
    started = time.time()
    typer.echo(f"simulating {cfg.simulate.agents} agents on {cfg.taskset.name} against "
               f"{cfg.simulate.url or f'{cfg.serve.host}:{cfg.serve.port}'} ...", err=True)
    snap = run(cfg, ident)
    rows = [r for r in live_reward.read_answers(cfg.state_dir) if r["t"] >= started]
    out = {**snap, **live_reward.summary(rows, started)}
    for b in out["live_reward_by_minute"]:
        typer.echo(f"minute {b['minute']:>5g}: live reward {b['reward']:.3f} (exact {b['exact']:.2f}, "
                   f"{b['answers']} answers, version {b['version']})")
    typer.echo(f"requests {out.get('requests', 0)}, answers {out.get('answers', 0)}, feedback posted "
               f"{out.get('feedback_posted', 0)}, ungraded {out.get('ungraded', 0)}, request errors "
               f"{out.get('request_errors', 0)}")
    if plot_dir is not None:
        from rftbus.apps.run.plots import plot_live

        plot_live(out["live_reward_by_minute"], plot_dir, f"{cfg.taskset.name}: live reward")
    if summary_json is not None:
        summary_json.write_text(json.dumps(out, indent=2))


def register(app: typer.Typer) -> None:
    app.command()(simulate)
