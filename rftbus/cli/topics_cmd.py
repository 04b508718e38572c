"""`rftbus topics create`: the declared topics, idempotently, with drift reported."""

from __future__ import annotations

import typer
from rich.markup import escape

from rftbus.cli.context import state
from rftbus.kafka.clients import check_reachable
from rftbus.kafka.topics import create_topics

app = typer.Typer(help="Manage the topics declared in the config.", no_args_is_help=True)

_STYLE = {"created": "green", "exists": "dim", "differs": "yellow", "error": "red"}


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
    """The topic ACLs: each topic written only by the role that produces it (rftbus/kafka/acls.py, docs/DEPLOY.md)."""
    from rftbus.kafka import acls as A

    st = state(ctx)
    cfg = st.config()
    rules = A.acls(cfg)
    if apply:
        check_reachable(cfg)
        st.console.print(f"created {A.apply(cfg, rules)} ACLs for {len(A.ROLES)} roles")
        return
    for line in A.commands(rules, cfg.bootstrap_servers):
        print(line)
