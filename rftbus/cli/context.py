"""Shared CLI state: the loaded config and the console, built once from the global options."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rftbus.config import Config, load_config


@dataclass
class CliState:
    config_path: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    console: Console = field(default_factory=lambda: Console(highlight=False))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))

    def config(self, **more: Any) -> Config:
        """Load the config with global overrides plus a command's own (e.g. `up --port`)."""
        overrides = dict(self.overrides)
        for dotted, value in more.items():
            if value is None:
                continue
            node = overrides
            *parents, last = dotted.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = value
        return load_config(self.config_path, overrides)


def state(ctx: typer.Context) -> CliState:
    obj = ctx.find_root().obj
    assert isinstance(obj, CliState), "global options were not parsed"
    return obj
