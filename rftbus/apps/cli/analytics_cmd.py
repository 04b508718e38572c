"""`rftbus analytics`: the ClickHouse sink of every topic, read-only queries, counts and the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from rftbus.apps.cli.context import state

app = typer.Typer(help="Experience analytics in ClickHouse (chDB embedded, or a server).", no_args_is_help=True)


@app.command("sink")
def sink(
    ctx: typer.Context,
    ident: str = typer.Option("0", "--id", help="Status file id (<state_dir>/status/analytics-<id>.json)."),
    until_end: bool = typer.Option(False, "--until-end", help="Exit once every partition is read to its end."),
) -> None:
    """Consume every rftbus topic into ClickHouse tables in batches (at-least-once + dedup = exact counts).

    Commits offsets only after a batch is written; SIGTERM or Ctrl-C drains, flushes and stops cleanly.
    Readers (`analytics query/report/counts`, the studio) open the data themselves, in the sandboxed reader.
    """
    st = state(ctx)
    cfg = st.config()
    from rftbus.consumers.analytics.sink import run

    run(cfg, ident, until_end=until_end, log=lambda m: st.err.print(escape(m)))


@app.command("query")
def query(
    ctx: typer.Context,
    sql: str = typer.Argument(..., help="One read-only statement; tables are in the analytics database."),
    param: list[str] = typer.Option([], "--param", "-p", help="name=value for a {name:Type} placeholder (repeatable)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | json | csv"),
    max_rows: int = typer.Option(200, "--max-rows", help="Rows shown by the table format (json/csv print all)."),
) -> None:
    """Run read-only SQL against the analytics tables, e.g.

    rftbus analytics query "SELECT reason, count() FROM rejections FINAL WHERE stage = {s:String} GROUP BY reason" -p s=filter
    """
    from rftbus.consumers.analytics.backends import QueryError
    from rftbus.consumers.analytics.query import FORMATS, as_csv, as_json, as_table, parse_params, run_query

    if fmt not in FORMATS:
        raise QueryError(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    st = state(ctx)
    res = run_query(st.config(), sql, parse_params(param))
    if fmt == "json":
        sys.stdout.write(as_json(res) + "\n")
    elif fmt == "csv":
        sys.stdout.write(as_csv(res))
    else:
        st.console.print(as_table(res, max_rows))


@app.command("schema")
def schema(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The analytics tables and their columns (what SHOW TABLES / DESCRIBE would say; the query path runs
    neither), and the functions a query may call."""
    from rftbus.consumers.analytics.schema import describe
    from rftbus.consumers.analytics.statement import CALLABLE

    st = state(ctx)
    tables = describe(st.config().analytics.database)
    if as_json:
        sys.stdout.write(json.dumps({"tables": tables, "functions": sorted(CALLABLE)}, indent=1) + "\n")
        return
    for t in tables:
        st.console.print(f"[bold]{t['table']}[/]: " + ", ".join(f"{c['name']} {escape(c['type'])}" for c in t["columns"]))
    st.console.print("[dim]functions: " + " ".join(sorted(CALLABLE)) + "[/]")


@app.command("counts")
def counts(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Distinct records, messages and undecodable messages per topic, after dedup."""
    from rftbus.consumers.analytics.tally import table_counts
    from rftbus.consumers.analytics.reader import open_reader

    st = state(ctx)
    with open_reader(st.config()) as b:
        c = table_counts(b)
    if as_json:
        sys.stdout.write(json.dumps(c, indent=1) + "\n")
        return
    t = Table("topic", "distinct records", "messages", "undecodable", header_style="bold")
    for key, v in c.items():
        t.add_row(key, str(v["records"]), str(v["messages"]), str(v["undecodable"]))
    st.console.print(t)


@app.command("report")
def report(ctx: typer.Context, out: Path = typer.Option(..., "--out", "-o", help="Folder for the PNGs and README.md.")) -> None:
    """Plots (PNG) and a markdown summary: reward by version, staleness, rejections, throughput/latency
    per stage, per-task pass rate, feedback volume and agreement."""
    from rftbus.consumers.analytics.report import build_report

    st = state(ctx)
    with st.err.status("querying and plotting ..."):
        summary = build_report(st.config(), out)
    for sec in summary["sections"].values():
        shown = f"[green]{sec['png']}[/]" if sec["png"] else "[dim]no data[/]"
        st.console.print(f"{escape(sec['title']):40} {sec['points']:6} points  {shown}")
    st.console.print(f"report: {escape(str(out / 'README.md'))}")


@app.command("ddl")
def ddl(
    ctx: typer.Context,
    kafka_engine: bool = typer.Option(False, "--kafka-engine", help="Also the server-side alternative to the sink: "
                                      "Kafka engine tables (AvroConfluent) + materialized views."),
    brokers: str = typer.Option(None, "--brokers", help="Broker list as the ClickHouse server reaches it "
                                "(default: kafka.bootstrap_servers)."),
    registry: str = typer.Option(None, "--registry", help="Schema Registry URL as the server reaches it "
                                 "(default: schema_registry.url)."),
) -> None:
    """Print the analytics DDL (what the sink creates), e.g. to create the tables on a server by hand."""
    from rftbus.consumers.analytics.backends import QueryError
    from rftbus.consumers.analytics.kafka_engine import kafka_engine_ddl
    from rftbus.consumers.analytics.schema import ddl_statements

    cfg = state(ctx).config()
    stmts = ddl_statements(cfg.analytics.database)
    if kafka_engine:
        url = registry or cfg.schema_registry.url
        if not url:
            raise QueryError("--kafka-engine reads AvroConfluent, which needs a Schema Registry: "
                             "pass --registry URL or set schema_registry.url")
        stmts += kafka_engine_ddl(cfg, brokers=brokers or cfg.bootstrap_servers, registry_url=url)
    sys.stdout.write("".join(f"{s};\n\n" for s in stmts))
