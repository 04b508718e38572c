"""`rftbus explore`: one explorer rollout worker in the explorers' consumer group."""

from __future__ import annotations

import json
import signal

import typer
from rich.markup import escape

from rftbus.apps.cli import own_metrics
from rftbus.apps.cli.context import state
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics


def explore(
    ctx: typer.Context,
    explorer_id: str = typer.Option(None, "--id", help="Explorer id (default host-pid)."),
    engine: str = typer.Option(None, "--engine", help="transformers | vllm | openai | dotted path."),
    workflow: str = typer.Option(None, "--workflow", help="single_turn | multi_turn | dotted path."),
    expert: bool = typer.Option(None, "--expert/--no-expert", help="Also publish expert demonstrations."),
    max_tasks: int = typer.Option(None, "--max-tasks", min=1, help="Exit after this many tasks."),
    idle_exit: float = typer.Option(None, "--idle-exit", help="Exit after this many seconds without a new task."),
    as_json: bool = typer.Option(False, "--json", help="Print the final figures as one JSON object."),
    metrics_port: int | None = own_metrics.port_option(),
) -> None:
    """Roll out tasks from topics.tasks into topics.experiences.raw until stopped (SIGTERM: finish the
    current group, flush, commit, exit 0)."""
    st = state(ctx)
    explorer = None
    running = False

    def on_signal(*_) -> None:
        if explorer is None or not running:  # still starting: nothing consumed or produced yet, so leave now
            raise SystemExit(0)
        explorer.request_stop()

    # First thing: a SIGTERM during the (slow) start is a clean stop too, not a death by signal that a
    # supervisor would restart (found by `rftbus chaos`: a drain's SIGTERM met a just-restarted explorer).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    cfg = st.config(**{"explorer.id": explorer_id, "explorer.engine.kind": engine, "explorer.workflow.kind": workflow,
                       "explorer.expert": expert, "explorer.max_tasks": max_tasks, "explorer.idle_exit_s": idle_exit})
    from rftbus.producers.explorer import Explorer  # heavy (torch): only for this command; before the broker

    def build() -> Explorer:
        return Explorer(cfg, report=lambda line: st.err.print(f"[dim]explorer:[/] {escape(line)}", soft_wrap=True))

    # Started beside the broker (kafka.wait_s, rftbus run): build the model while it starts (its clients connect
    # lazily). Otherwise an unreachable broker is said before a build that can take minutes (vLLM).
    if cfg.kafka.wait_s:
        explorer = build()
    create_topics(cfg, check_reachable(cfg))
    explorer = explorer or build()
    st.err.print(f"explorer {explorer.id} ({cfg.explorer.engine.kind}, v{explorer.engine.version}) "
                 f"on {cfg.topics.tasks.name} -> {cfg.topics.raw.name}; status in {explorer.status.path}")
    running = True
    stop_metrics = own_metrics.serve_own(cfg, "explorer", explorer.id, metrics_port, st.err.print)
    try:
        result = explorer.run()
    finally:
        if stop_metrics is not None:
            stop_metrics()
    if as_json:
        st.console.out(json.dumps(result), highlight=False)
    else:
        st.console.print(", ".join(f"{k}={v}" for k, v in result.items()))


def register(app: typer.Typer) -> None:
    app.command()(explore)
