"""Running the app on uvicorn: in the foreground (`rftbus serve`) or on a background thread (embedding,
tests). uvicorn owns SIGTERM/SIGINT: in-flight requests finish, then the lifespan flushes Kafka."""

from __future__ import annotations

import threading
import time

import uvicorn

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.producers.serve.app import create_app
from rftbus.producers.serve.foreground import run_foreground
from rftbus.producers.serve.service import LiveService


def uvicorn_config(cfg: Config, service: LiveService | None = None, log_level: str = "info") -> uvicorn.Config:
    app = create_app(cfg, service)
    # server_header off: no version banner; access log lines carry method, path and status, never headers.
    return uvicorn.Config(app, host=cfg.serve.host, port=cfg.serve.port, log_level=log_level,
                          server_header=False, timeout_graceful_shutdown=int(cfg.serve.ack_timeout_s) + 5)


def serve(cfg: Config, service: LiveService | None = None, log_level: str = "info") -> None:
    run_foreground(uvicorn.Server(uvicorn_config(cfg, service, log_level)),
                   f"rftbus serve could not start on {cfg.serve.host}:{cfg.serve.port} (see the log above)")


class BackgroundServer:
    """The same server on a daemon thread; `url` once started. Use as a context manager."""

    def __init__(self, cfg: Config, service: LiveService | None = None, log_level: str = "warning"):
        self.cfg = cfg
        self.server = uvicorn.Server(uvicorn_config(cfg, service, log_level))
        self.service: LiveService = self.server.config.app.state.service  # type: ignore[union-attr]  # our FastAPI app
        self._thread = threading.Thread(target=self.server.run, name="serve-uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.cfg.serve.host}:{self.cfg.serve.port}"

    def start(self, timeout_s: float = 120.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RftbusError(f"rftbus serve did not start on {self.url} within {timeout_s:g}s")
            time.sleep(0.05)
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
