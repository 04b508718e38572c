"""`rftbus gate`: the promotion gate (consumers/gate/) until SIGTERM or Ctrl-C: decisions on topics.decisions that
`rftbus serve` follows when gate.enabled is set; `rftbus run` starts it beside serve."""

from __future__ import annotations

import signal

import typer

from rftbus.cli.context import state
from rftbus.kafka.clients import check_reachable
from rftbus.kafka.topics import create_topics


def gate(ctx: typer.Context) -> None:
    """Decide which weight version serves users: canary, promote, hold or roll back, on live grades and eval."""
    from rftbus.consumers.gate.service import Gate

    st = state(ctx)
    cfg = st.config()
    create_topics(cfg, check_reachable(cfg))  # started beside the broker (rftbus run): its topics may be new
    g = Gate(cfg, lambda m: st.err.print(m, markup=False, highlight=False))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: g.stop())
    st.err.print(f"gate {cfg.gate.id}: {cfg.model.name}, canary share {cfg.gate.canary_share:g}, "
                 f"{cfg.gate.min_answers} graded answers a look, margin {cfg.gate.margin:g}, alpha {cfg.gate.alpha:g}")
    g.run()
    st.err.print(f"gate stopped: {g.counts}")


def register(app: typer.Typer) -> None:
    app.command()(gate)
