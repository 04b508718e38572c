"""`rftbus otel collector`: the OpenTelemetry Collector with rftbus's pipeline (OTLP in, topics.spans out), built
from its Go modules the first time; `rftbus run` starts it as a stage when otel.collector is set."""

from __future__ import annotations

import os
from pathlib import Path

import typer
import yaml

from rftbus.apps.cli.context import state

app = typer.Typer(help="Agents' OpenTelemetry traces: the Collector that writes them to topics.spans.",
                  no_args_is_help=True)


@app.command("collector")
def collector(ctx: typer.Context,
              print_config: bool = typer.Option(False, "--print-config", help="print the Collector's YAML and exit")) -> None:
    """Run the Collector in the foreground (this process becomes it): agents send OTLP to otel.host:http_port."""
    from rftbus.ground.kafka.clients import check_reachable
    from rftbus.ground.kafka.topics import create_topics
    from rftbus.ground.otel.build import ensure_collector
    from rftbus.ground.otel.collector import PASSWORD_ENV, CollectorSpec, collector_config

    st = state(ctx)
    cfg = st.config()
    o = cfg.otel
    client = dict(cfg.kafka.client)
    spec = CollectorSpec.for_client(client, brokers=cfg.bootstrap_servers.split(","), topic=cfg.topics.spans.name,
                                    host=o.host, http_port=o.http_port, grpc_port=o.grpc_port)
    text = yaml.safe_dump(collector_config(spec), sort_keys=False)
    if print_config:
        print(text, end="")
        return
    binary = Path(o.collector_binary) if o.collector_binary else ensure_collector(
        Path(o.cache_dir or Path(cfg.state_dir) / "otelcol"), st.err)
    create_topics(cfg, check_reachable(cfg))  # (started beside the broker: the spans topic may be new)
    folder = Path(cfg.state_dir) / "otelcol"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "otelcol.yaml"
    path.write_text(text)
    st.err.print(f"OpenTelemetry Collector: OTLP on {o.host}:{o.http_port} (HTTP) and {o.grpc_port} (gRPC) -> "
                 f"{cfg.topics.spans.name} at {cfg.bootstrap_servers}", markup=False, highlight=False)
    if spec.sasl_username:  # (the password by the environment, never in the file)
        os.environ[PASSWORD_ENV] = str(client.get("sasl.password", ""))
    os.execv(str(binary), [str(binary), "--config", f"file:{path}"])  # SIGTERM: it flushes its batch and exits


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="otel")
