"""Shared CLI state: the loaded config and the console, built once from the global options."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rftbus.ground.config import USER_CODE_ENV, Config, find_config_file, load_config


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
        cfg = load_config(self.config_path, overrides)
        user_code_on_path(find_config_file(self.config_path))
        from rftbus.apps.run.secure import as_admin_of_the_run  # (a run's own broker takes only its users)

        return as_admin_of_the_run(cfg)


def user_code_on_path(config_file: Path | None) -> None:
    """A user's reward, workflow or engine module sits beside their config or in the working directory: both go on
    this process's import path after site-packages and the standard library, so a file there never shadows them,
    and, through RFTBUS_USER_CODE_PATH, on every child's the same way (`rftbus run` starts its children with a
    config file in the state folder, far from the user's). Not PYTHONPATH: its folders come before the standard
    library, and a `json.py` beside the config replaced the library's in every child (#63)."""
    inherited = [f for f in os.environ.get(USER_CODE_ENV, "").split(os.pathsep) if f]
    folders = inherited + [str(Path.cwd())] + ([str(config_file.resolve().parent)] if config_file is not None
                                                else [])
    mine: list[str] = []
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
        if folder not in mine:
            mine.append(folder)
    os.environ[USER_CODE_ENV] = os.pathsep.join(mine)


def state(ctx: typer.Context) -> CliState:
    obj = ctx.find_root().obj
    assert isinstance(obj, CliState), "global options were not parsed"
    return obj
