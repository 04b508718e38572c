"""`--metrics-port` of a stage started on its own (`rftbus train | explore | streams`, as compose and Kubernetes
start them): the same Prometheus families `rftbus run` serves (rftbus/apps/run/metrics.py), from this process's status
file, so every process of the loop can be scraped, supervised by `rftbus run` or not."""

from __future__ import annotations

from collections.abc import Callable

import typer

from rftbus.ground.config import Config

PORT_HELP = "Serve Prometheus /metrics of this process on this port (0: any free one; default: none)."


def port_option() -> int | None:
    return typer.Option(None, "--metrics-port", min=0, max=65535, help=PORT_HELP)


def serve_own(cfg: Config, role: str, ident: str | None, port: int | None,
              say: Callable[[str], None]) -> Callable[[], None] | None:
    """Start /metrics for the status files of `role` (and `ident`, when the command knows it); its stop."""
    if port is None:
        return None
    from rftbus.apps.run.metrics import StatusCollector, serve_metrics

    collector = StatusCollector(cfg.state_dir, role=role, ident=ident)
    started = serve_metrics(cfg.run.metrics_host, port, collector)
    if started is None:
        say(f"metrics: cannot listen on {cfg.run.metrics_host}:{port}; no /metrics for this {role}")
        return None
    stop, bound = started
    say(f"metrics: http://{cfg.run.metrics_host}:{bound}/metrics")
    return stop
