"""What a benchmark command needs from the CLI's global options, as an interface: the loaded config, its path
and the consoles. The CLI's state object (rftbus/apps/cli/context.py) provides it; the benchmarks never import the
CLI (it imports them), so the two stay one way."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import typer
from rich.console import Console

from rftbus.ground.config import Config


class BenchState(Protocol):
    config_path: Path | None
    console: Console
    err: Console

    def config(self, **more: Any) -> Config: ...


def state(ctx: typer.Context) -> BenchState:
    obj = ctx.find_root().obj
    if obj is None or not callable(getattr(obj, "config", None)):
        raise RuntimeError("global options were not parsed")  # (only a command run outside the CLI gets here)
    return obj
