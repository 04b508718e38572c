"""`rftbus streams`: run one Faust stream-processor worker (more processes share the partitions)."""

from __future__ import annotations

import sys

import typer

from rftbus.apps.cli import own_metrics
from rftbus.apps.cli.context import state


def streams(
    ctx: typer.Context,
    worker_id: str = typer.Option(None, "--worker-id", help="Status file id (default <hostname>-<pid>)."),
    log_level: str = typer.Option(None, "--log-level", help="Faust/rftbus log level (default streams.log_level)."),
    metrics_port: int | None = own_metrics.port_option(),
    patches: bool = typer.Option(False, "--patches", help="Instead: list every change made to faust-streaming "
                                 "and aiokafka (how, why, upstream issue, the test that fails without it)."),
) -> None:
    """Verify, join feedback, group advantages, filter, prioritize and route raw experiences (Faust worker).

    Reads topics.raw and topics.feedback; writes curated / curated_priority / expert / rejected and
    metrics; writes <state_dir>/status/streams-<id>.json every second; SIGTERM or Ctrl-C stops it cleanly.
    """
    st = state(ctx)
    if patches:
        from rftbus.streams.faust_patches import PATCHES

        patched = sum(p.how == "patch" for p in PATCHES)
        for p in PATCHES:
            st.console.print(f"[bold]{p.name}[/] ({p.how}): {p.replaces}\n  why: {p.why}\n  upstream: {p.upstream}"
                             f"\n  test: {p.test}")
        st.console.print(f"{len(PATCHES)} changes: {len(PATCHES) - patched} subclass overrides, {patched} run-time "
                         "patches of aiokafka / Faust attributes")
        return
    cfg = st.config(**{"streams.worker_id": worker_id, "streams.log_level": log_level})
    from rftbus.streams.worker import run

    stop_metrics = own_metrics.serve_own(cfg, "streams", cfg.streams.worker_id, metrics_port, st.err.print)
    try:
        code = run(cfg, cfg.streams.worker_id)
    finally:
        if stop_metrics is not None:
            stop_metrics()
    sys.exit(code)


def register(app: typer.Typer) -> None:
    app.command()(streams)
