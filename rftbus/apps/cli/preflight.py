"""The checks a command runs at start, before it touches Kafka or loads a model. The same function runs in the
command and in tests/unit/test_compose.py against each compose service's settings (#35), so a service that would
refuse to start fails a test here rather than a deployment."""

from __future__ import annotations

from pathlib import Path

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError

BUILTIN_TASKSETS = ("addition", "reverse")


def serve_checks(cfg: Config) -> None:
    """Listening beyond loopback, every scope serve answers (the studio's read scope too, where it is
    mounted) must have tokens, unless serve.allow_open says otherwise."""
    from rftbus.producers.serve.app import served_scopes
    from rftbus.ground.web.auth import TokenAuth

    TokenAuth.from_config(cfg.serve).check_exposure(cfg.serve.host, cfg.serve.allow_open, served_scopes(cfg))


def tasks_publish_checks(source: str, fmt: str) -> None:
    from rftbus.producers.tasks.sources import FORMATS

    if fmt not in FORMATS:
        raise RftbusError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if source not in BUILTIN_TASKSETS and "/" not in source.strip("/") and not Path(source).exists():
        raise RftbusError(f"task source {source!r} is neither a file/folder nor a built-in taskset ({', '.join(BUILTIN_TASKSETS)}): "
                          "check the path")


def preflight(cfg: Config, argv: list[str]) -> None:
    """The start-up checks of `rftbus <argv>` (a service's command line), for commands that have any."""
    if argv[:1] == ["serve"]:
        serve_checks(cfg)
    elif argv[:2] == ["tasks", "publish"] and len(argv) > 2:
        fmt = argv[argv.index("--format") + 1] if "--format" in argv else "auto"
        tasks_publish_checks(argv[2], fmt)
