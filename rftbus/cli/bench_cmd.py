"""`rftbus bench ...`: benchmarks whose figures go to docs/BENCHMARKS.md.

Each benchmark lives in its own module (`bench_<name>.py`) and is registered here with one line.
"""

from __future__ import annotations

import typer

app = typer.Typer(help="Benchmarks (figures in docs/BENCHMARKS.md); each has --json.", no_args_is_help=True)

# Registered benchmarks (one line each): app.command("NAME")(module.function)
