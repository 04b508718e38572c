"""Running a uvicorn server in the foreground of a command (`rftbus serve`, `rftbus studio`): light, so a
command that serves no model does not import one."""

from __future__ import annotations

import signal

import uvicorn

from rftbus.ground.errors import RftbusError


def run_foreground(server: uvicorn.Server, failed: str) -> None:
    """Run a uvicorn server until SIGTERM/SIGINT; `failed` is the error when it never started."""
    # uvicorn re-raises the signal it shut down on; by then the shutdown was graceful, so SIGTERM ends
    # the command with exit 0 (as `explore` and `streams` do) instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        raise RftbusError(failed)
