"""`rftbus up | down | status`: the embedded broker's lifecycle and a view of the cluster."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from rftbus.ground.broker import embedded
from rftbus.apps.cli.context import state
from rftbus.ground.kafka import inspect
from rftbus.ground.kafka.clients import BrokerUnreachable, check_reachable
from rftbus.ground.kafka.committed import CommittedOffsets


def up(
    ctx: typer.Context,
    port: int = typer.Option(None, "--port", "-p", help="Broker port (default 9092; the controller uses port+1; "
                             "with --nodes 3, node k uses port+2k and port+2k+1)."),
    host: str = typer.Option(None, "--host", help="Address to listen on (default 127.0.0.1)."),
    nodes: int = typer.Option(None, "--nodes", help="1 (default) or 3: a replicated KRaft cluster (broker.nodes)."),
) -> None:
    """Start the embedded Apache Kafka broker (KRaft: one node, or a cluster of three) and wait until it answers."""
    st = state(ctx)
    cfg = st.config(**{"broker.port": port, "broker.host": host, "broker.nodes": nodes})
    what = "Kafka" if cfg.broker.nodes == 1 else f"a {cfg.broker.nodes}-node Kafka cluster"
    with st.err.status(f"starting {what} {cfg.broker.kafka_version} in {cfg.state_dir} ..."):
        info = embedded.start(cfg, st.err)
    verb = "started" if info.started else "already running"
    pids = ", ".join(f"node {n} pid {p}" for n, p in embedded.running_pids(cfg).items())
    st.err.print(f"Kafka {verb} ({pids}; state {info.state_dir})")
    st.console.print(info.bootstrap)


def down(ctx: typer.Context) -> None:
    """Stop the embedded broker cleanly (controlled shutdown; every record stays on disk)."""
    st = state(ctx)
    cfg = st.config()
    with st.err.status("stopping Kafka ..."):
        pid = embedded.stop(cfg)
    st.console.print(f"Kafka broker stopped (pid {pid})" if pid else f"no broker running for {cfg.state_dir}")


def status(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Broker, topics (partitions, retention, compaction, size) and consumer-group lag."""
    st = state(ctx)
    cfg = st.config()
    pid = embedded.running_pid(cfg)
    report: dict = {"bootstrap": cfg.bootstrap_servers, "embedded_pid": pid, "reachable": False, "topics": [], "groups": [],
                    "nodes": {str(n): p for n, p in embedded.running_pids(cfg).items()}}
    try:
        admin = check_reachable(cfg, timeout=5.0)
        report["reachable"] = True
        report["topics"] = inspect.as_dicts(inspect.topics_info(admin))
        with CommittedOffsets(cfg) as committed:
            report["groups"] = inspect.as_dicts(inspect.groups_info(admin, committed))
    except BrokerUnreachable as e:
        report["error"] = str(e)
    if as_json:
        st.console.print_json(json.dumps(report))
    else:
        _print_status(st.console, report)
    if not report["reachable"]:
        raise typer.Exit(1)


def _print_status(console, report: dict) -> None:
    where = f"embedded pid {report['embedded_pid']}" if report["embedded_pid"] else "not the embedded broker"
    if report["reachable"]:
        console.print(f"[green]broker[/] {report['bootstrap']} reachable ({where})")
    else:
        console.print(f"[red]broker[/] {escape(report['bootstrap'])} not reachable: {escape(report.get('error', ''))}")
        return
    if len(report["nodes"]) > 1:
        console.print("nodes: " + ", ".join(f"{n} {'[green]pid ' + str(p) + '[/]' if p else '[red]down[/]'}"
                                            for n, p in report["nodes"].items()))
    t = Table("topic", "partitions", "replicas", "cleanup", "retention.ms", "messages", "leaders", "under-replicated",
              title="topics")
    t.columns[0].no_wrap = True
    for tp in report["topics"]:
        leaders = " ".join(str(v) for _, v in sorted(tp["leaders"].items(), key=lambda kv: int(kv[0])))
        under = str(tp["under_replicated"]) if not tp["under_replicated"] else f"[red]{tp['under_replicated']}[/]"
        t.add_row(tp["name"], str(tp["partitions"]), str(tp["replication_factor"]), str(tp["cleanup_policy"]),
                  str(tp["retention_ms"]), str(tp["messages"]), leaders, under)
    console.print(t)
    g = Table("group", "state", "lag", title="consumer groups")
    g.columns[0].no_wrap = True
    for grp in report["groups"]:
        g.add_row(grp["group_id"], grp["state"], str(grp["lag"]))
    console.print(g if report["groups"] else "no consumer groups")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
