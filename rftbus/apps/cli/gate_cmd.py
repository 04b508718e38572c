"""`rftbus gate`: the promotion gate (rftbus/consumers/gate/) until SIGTERM or Ctrl-C: decisions on topics.decisions that
`rftbus serve` follows when gate.enabled is set; `rftbus run` starts it beside serve."""

from __future__ import annotations

import json
import signal

import typer

from rftbus.apps.cli.context import state
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics


def gate(ctx: typer.Context,
         audit: bool = typer.Option(False, "--audit", help="instead: check the log (every served answer's version "
                                    "has a promote or canary decision before it, no session switched version, each "
                                    "rollback's time after its first canary answer); JSON out, exit 1 if not ok")) -> None:
    """Decide which weight version serves users: canary, promote, hold or roll back, on live grades and eval."""
    from rftbus.consumers.gate.service import Gate

    st = state(ctx)
    cfg = st.config()
    if audit:
        from rftbus.consumers.gate.audit import audit_log

        check_reachable(cfg)
        found = audit_log(cfg)
        print(json.dumps(found, indent=2))
        raise typer.Exit(0 if found["ok"] else 1)
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
