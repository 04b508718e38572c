"""`rftbus synthesize`: the synthesize stage (rftbus/producers/synthesis/) until SIGTERM or Ctrl-C; `rftbus run` starts
it when synthesis.enabled is set."""

from __future__ import annotations

import signal

import typer

from rftbus.apps.cli.context import state
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics


def synthesize(ctx: typer.Context) -> None:
    """Write new tasks from the explorers' outcomes: verified, new, bounded, with their lineage, to the tasks topic."""
    from rftbus.producers.synthesis.stage import Synthesize

    st = state(ctx)
    cfg = st.config()
    create_topics(cfg, check_reachable(cfg))
    sc = cfg.synthesis
    s = Synthesize(cfg, lambda m: st.err.print(m, markup=False, highlight=False))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: s.stop())
    st.err.print(f"synthesize {sc.id}: synthesizer {sc.synthesizer.name}, parents {', '.join(sc.parents)}, "
                 f"{sc.per_parent} a parent, {sc.per_minute:g} a minute, share <= {sc.max_share:g}, "
                 f"generations <= {sc.max_generation}", markup=False)
    s.run()
    st.err.print(f"synthesize stopped: {dict(s.counts)}; refused {dict(s.refused)}", markup=False)


def register(app: typer.Typer) -> None:
    app.command()(synthesize)
