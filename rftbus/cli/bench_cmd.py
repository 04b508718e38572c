"""`rftbus bench ...`: benchmarks whose figures go to docs/BENCHMARKS.md.

Each benchmark lives in its own module (`bench_<name>.py`) and is registered here with one line.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="Benchmarks (figures in docs/BENCHMARKS.md); each has --json.", no_args_is_help=True)

from rftbus.cli import bench_async, bench_explore, bench_streams, bench_sync  # noqa: E402  (after `app` exists)

app.command("async")(bench_async.bench_async)
app.command("explore")(bench_explore.explore)
app.command("streams")(bench_streams.streams)
app.command("sync")(bench_sync.sync)
