"""`rftbus track`: the trackers of `run.report_to` on their own (compose, Kubernetes), following the metrics topic
until SIGTERM or Ctrl-C; `rftbus run` runs the same follower in its own process."""

from __future__ import annotations

import signal
import threading

import typer

from rftbus.apps.cli.context import state
from rftbus.ground.kafka.clients import check_reachable


def track(ctx: typer.Context) -> None:
    """Feed TensorBoard / W&B / MLflow (run.report_to) from the metrics topic until stopped."""
    from rftbus.consumers.trackers.follow import MetricsFollower, make_trackers

    st = state(ctx)
    cfg = st.config()
    if not cfg.run.report_to:
        raise typer.BadParameter("run.report_to is empty: name tensorboard, wandb or mlflow")
    check_reachable(cfg)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    follower = MetricsFollower(cfg, make_trackers(cfg), lambda m: st.err.print(m, markup=False))
    st.err.print(f"tracking {cfg.topics.metrics.name} to {', '.join(cfg.run.report_to)}")
    follower.run(stop)
    st.err.print(f"stopped: {follower.logged} points written")


def register(app: typer.Typer) -> None:
    app.command()(track)
