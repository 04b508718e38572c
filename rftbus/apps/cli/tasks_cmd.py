"""`rftbus tasks publish SOURCE`: publish a taskset to `topics.tasks` (and expert demos on request)."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rftbus.apps.cli.context import state
from rftbus.apps.cli.preflight import tasks_publish_checks
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.topics import create_topics
from rftbus.producers.tasks.publish import PublishError, publish_tasks
from rftbus.producers.tasks.sources import FORMATS, read_source

app = typer.Typer(help="Tasksets: publish tasks for the explorers.", no_args_is_help=True)


@app.command()
def publish(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="Built-in taskset (addition, reverse) or a JSONL/Parquet/CSV file or HF dataset folder."),
    split: str = typer.Option(None, "--split", help="train or eval (built-ins); the split stamped on file tasks / picked from a DatasetDict."),
    n: int = typer.Option(None, "--n", min=1, help="How many tasks (built-ins: default taskset.n; files: the first N rows)."),
    seed: int = typer.Option(None, "--seed", help="Built-ins: which deterministic draw."),
    taskset: str = typer.Option(None, "--taskset", help="Files: the taskset name stamped on tasks (default: file name)."),
    fmt: str = typer.Option("auto", "--format", help=f"One of {', '.join(FORMATS)}."),
    expert: bool = typer.Option(False, "--expert", help="Also publish expert demonstrations to topics.expert."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object."),
) -> None:
    """Publish tasks keyed by their stable task_id; bad rows are reported by line and skipped."""
    st = state(ctx)
    cfg = st.config()
    ts = cfg.taskset
    tasks_publish_checks(source, fmt)
    create_topics(cfg, check_reachable(cfg))
    is_builtin = source in ("addition", "reverse")
    rows = read_source(source, fields=ts.fields, split=split or ts.split, n=n or (ts.n if is_builtin else None),
                       seed=ts.seed if seed is None else seed, fmt=fmt, taskset=taskset, params=ts.params)
    total = (n or ts.n) if is_builtin else n
    with Progress(TextColumn("publishing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=st.err, transient=True, disable=as_json) as bar:
        job = bar.add_task("tasks", total=total)

        def on_row(row):
            bar.advance(job)
            if row.task is None:
                st.err.print(f"[yellow]skipped {escape(row.where)}:[/] {escape(row.error or '')}", soft_wrap=True)
        report = publish_tasks(cfg, rows, expert=expert, on_row=on_row)
    summary = {"topic": cfg.topics.tasks.name, "published": report.published, "expert": report.expert,
               "bad_rows": [{"where": w, "error": e} for w, e in report.bad], "failed": report.failed}
    if as_json:
        st.console.out(json.dumps(summary), highlight=False)
    else:
        st.console.print(f"published {report.published} tasks to {cfg.topics.tasks.name}"
                         + (f" and {report.expert} expert demonstrations to {cfg.topics.expert.name}" if expert else "")
                         + (f"; skipped {len(report.bad)} bad rows" if report.bad else ""))
    if report.failed:
        raise PublishError(f"{len(report.failed)} records were not acknowledged by Kafka: {report.failed[0]}")
    if report.bad:
        first = ", ".join(w for w, _ in report.bad[:5])
        raise RftbusError(f"{len(report.bad)} bad rows skipped ({first}{', ...' if len(report.bad) > 5 else ''}); "
                          f"the {report.published} good ones are published")


def register(main_app: typer.Typer) -> None:
    main_app.add_typer(app, name="tasks")
