"""`rftbus topics list|create|acls`: what each topic is, the declared topics created idempotently with drift
reported, and who may write each."""

from __future__ import annotations

import typer
from rich.markup import escape

from rftbus.apps.cli.context import state
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics

app = typer.Typer(help="Manage the topics declared in the config.", no_args_is_help=True)

_STYLE = {"created": "green", "exists": "dim", "differs": "yellow", "error": "red"}


@app.command("list")
def list_topics(ctx: typer.Context) -> None:
    """Every topic rftbus uses, from the registry (rftbus/ground/kafka/registry.py) with this config's names: what a record
    is, its key, its value schema, partitions, retention and cleanup, and who may write it. Needs no broker."""
    from rich.table import Table

    from rftbus.ground.kafka import registry

    st = state(ctx)
    cfg = st.config()
    table = Table("key", "name", "holds", "record key", "value", "partitions", "retention", "cleanup", "writers")
    for t in registry.TOPICS:
        spec = t.spec(cfg)
        retention = ("forever" if spec.retention_ms == -1 else "broker default" if spec.retention_ms is None
                     else f"{spec.retention_ms / 86_400_000:g} d")
        table.add_row(t.key, escape(spec.name), t.holds, t.record_key, t.value.__name__ if t.value is not None else t.encoding, str(spec.partitions),
                      retention, spec.cleanup_policy, ", ".join(t.writers))
    for it in registry.INTERNAL:
        table.add_row("(streams)", escape(it.name(cfg)), it.holds, "", "streams' own bytes", "as raw", "",
                      it.cleanup_policy, "streams")
    st.console.print(table)


@app.command("create")
def create(ctx: typer.Context) -> None:
    """Create every declared topic that is missing; report where an existing one differs."""
    st = state(ctx)
    cfg = st.config()
    admin = check_reachable(cfg)
    results = create_topics(cfg, admin)
    for r in results:
        st.console.print(f"[{_STYLE[r.status]}]{r.status:8}[/] {escape(r.name)}")
        for d in r.differences:
            st.console.print(f"         {escape(d)}")
        if r.error:
            st.console.print(f"         {escape(r.error)}")
    if any(r.status == "error" for r in results):
        raise typer.Exit(1)


@app.command("acls")
def acls(
    ctx: typer.Context,
    apply: bool = typer.Option(False, "--apply", help="Create them through the admin API (as a super user: "
                               "kafka.client holds its SASL settings) instead of printing kafka-acls.sh lines."),
) -> None:
    """The topic ACLs: each topic written only by the role that produces it (rftbus/ground/kafka/acls.py, docs/DEPLOY.md)."""
    from rftbus.ground.kafka import acls as A

    st = state(ctx)
    cfg = st.config()
    rules = A.acls(cfg)
    if apply:
        check_reachable(cfg)
        st.console.print(f"created {A.apply(cfg, rules)} ACLs for {len(A.ROLES)} roles")
        return
    for line in A.commands(rules, cfg.bootstrap_servers):
        print(line)
