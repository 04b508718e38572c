"""`rftbus run`: the whole loop on this machine; `rftbus check`: what a run would trip on (--bus: every record
type through the bus)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from rftbus.apps.cli.context import state
from rftbus.ground.config import find_config_file
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics


def run(
    ctx: typer.Context,
    config: Path = typer.Argument(None, help="Config file (default: the global --config, else the built-in toy defaults)."),
    summary_json: Path = typer.Option(None, "--summary-json", help="Also write the summary JSON here."),
    minutes: float = typer.Option(None, "--minutes", help="Wall-clock budget (run.max_minutes)."),
    max_steps: int = typer.Option(None, "--max-steps", help="Stop once the trainer reaches this step (run.max_steps)."),
) -> None:
    """Run the whole loop: broker, topics, taskset, explorer(s), streams, trainer; live view; eval; summary."""
    from rftbus.apps.run.check import check_config
    from rftbus.apps.run.job import MainJob

    st = state(ctx)
    if config is not None:
        st.config_path = config
    cfg = st.config(**{"run.max_minutes": minutes, "run.max_steps": max_steps})
    rep = check_config(cfg, find_config_file(st.config_path))  # what `rftbus check` says, before anything starts
    show_report(st, rep)
    if not rep.ok:
        st.err.print(f"[red]not started: {len(rep.errors)} problem(s) with the config (`rftbus check` lists them)[/]")
        raise typer.Exit(2)
    summary = MainJob(cfg, st.console, st.err).run()
    text = json.dumps(summary, indent=2)
    if summary_json:
        summary_json.write_text(text)
    keys = ["stop_reason", "eval_reward_initial", "eval_reward_final", "trainer_steps", "versions_published",
            "experiences_produced", "experiences_trained", "experiences_rejected", "experiences_in_flight",
            "experiences_lost", "counts_reconcile", "restarts", "stages_dead", "max_staleness_trained",
            "wall_seconds", "plots"]
    table = Table("", "", title="summary", show_header=False)
    for k in keys:
        table.add_row(k, str(summary.get(k)))
    st.console.print(table)
    if not summary["counts_reconcile"]:
        for line in summary.get("lost_or_duplicated_examples") or []:  # which records, so a failed run says where
            st.err.print(escape(line), soft_wrap=True)
        if summary.get("reconcile_error"):
            st.err.print(f"[red]{escape(summary['reconcile_error'])}[/]", soft_wrap=True)
        raise typer.Exit(1)


def show_report(st, rep) -> None:
    """One line per problem, never wrapped (a log or a terminal narrower than the message)."""
    for line in rep.notes:
        st.console.print(f"ok: {escape(line)}", soft_wrap=True)
    for line in rep.warnings:
        st.err.print(f"[yellow]warning:[/] {escape(line)}", soft_wrap=True)
    for line in rep.errors:
        st.err.print(f"[red]error:[/] {escape(line)}", soft_wrap=True)


def check(
    ctx: typer.Context,
    config: Path = typer.Argument(None, help="Config file (default: the global --config)."),
    bus: bool = typer.Option(False, "--bus", help="Instead: round-trip one record of every type through Kafka."),
) -> None:
    """What a run would trip on, before anything starts: the model and its chat template, the data, every reward
    scoring a real row, the sizes the run asks for; one line per problem, exit 1 on an error. --bus: every record
    type through Kafka with the configured codec."""
    from rftbus.apps.run.check import check_config

    st = state(ctx)
    if config is not None:
        st.config_path = config
    cfg = st.config()
    if bus:
        return _bus_check(st, cfg)
    rep = check_config(cfg, find_config_file(st.config_path))
    show_report(st, rep)
    st.console.print(f"{'checked' if rep.ok else 'FAILED'} in {rep.seconds:.1f} s: {len(rep.errors)} error(s), "
                     f"{len(rep.warnings)} warning(s)")
    if not rep.ok:
        raise typer.Exit(1)


def _bus_check(st, cfg) -> None:
    from rftbus.apps.bus_check import round_trip

    create_topics(cfg, check_reachable(cfg))
    results = round_trip(cfg)
    table = Table("topic", "record", "partition", "offset", "round trip", title="every record type through the bus")
    for r in results:
        table.add_row(r.topic, r.record_type, str(r.partition), str(r.offset), "[green]ok[/]" if r.equal else "[red]DIFFERS[/]")
    st.console.print(table)
    if not all(r.equal for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(check)
