"""`rftbus`: continuous RL fine-tuning over Apache Kafka.

Every command reads one YAML config (`--config`, RFTBUS_CONFIG or ./rftbus.yaml), overridable by
RFTBUS_* environment variables and the flags below.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from rftbus.apps.cli import (
    bench_cmd, broker_cmds, explore_cmd, run_cmd, streams_cmd, tail_cmd, tasks_cmd, topics_cmd, train_cmd,
)
from rftbus.apps.cli import config_cmd, serve_cmd, simulate_cmd, studio_cmd
from rftbus.apps.cli import analytics_cmd
from rftbus.apps.cli import chaos_cmd
from rftbus.apps.cli import export_cmd
from rftbus.apps.cli import init_cmd
from rftbus.apps.cli import gate_cmd, otel_cmd, synthesize_cmd, track_cmd
from rftbus.apps.cli.context import CliState
from rftbus.ground.errors import RftbusError

app = typer.Typer(
    name="rftbus",
    help="Continuous reinforcement fine-tuning of language models on Apache Kafka.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _global(
    ctx: typer.Context,
    config: Path = typer.Option(None, "--config", "-c", help="YAML config file (default: RFTBUS_CONFIG or ./rftbus.yaml)."),
    state_dir: Path = typer.Option(None, "--state-dir", help="Folder for broker data, jars and checkpoints (default .rftbus)."),
    bootstrap: str = typer.Option(None, "--bootstrap-servers", "-b", help="Kafka bootstrap servers (default: the embedded broker)."),
) -> None:
    overrides: dict = {}
    if state_dir is not None:
        overrides["state_dir"] = str(state_dir)
    if bootstrap is not None:
        overrides["kafka"] = {"bootstrap_servers": bootstrap}
    ctx.obj = CliState(config_path=config, overrides=overrides)


# In the order `--help` lists them: the loop first, then its parts, then the bus tools.
run_cmd.register(app)
tasks_cmd.register(app)
explore_cmd.register(app)
streams_cmd.register(app)
train_cmd.register(app)
serve_cmd.register(app)
simulate_cmd.register(app)
studio_cmd.register(app)
broker_cmds.register(app)
config_cmd.register(app)
init_cmd.register(app)
export_cmd.register(app)
app.add_typer(topics_cmd.app, name="topics")
tail_cmd.register(app)
track_cmd.register(app)
gate_cmd.register(app)
otel_cmd.register(app)
synthesize_cmd.register(app)
app.add_typer(bench_cmd.app, name="bench")
chaos_cmd.register(app)
app.add_typer(analytics_cmd.app, name="analytics")


# A role's packages -> the extra that installs them (pyproject.toml): a command run where its role is not
# installed says which extra it needs rather than printing a traceback.
EXTRA_OF = {**dict.fromkeys(("torch", "transformers", "tokenizers", "safetensors", "gguf", "accelerate", "peft"),
                            "explorer, serve or trainer"),
            **dict.fromkeys(("math_verify", "openai", "datasets", "pyarrow"), "explorer"),
            **dict.fromkeys(("faust", "aiokafka", "rocksdict", "cramjam"), "streams"),
            **dict.fromkeys(("deepspeed", "tensorboard"), "trainer"),
            **dict.fromkeys(("fastapi", "uvicorn"), "serve or studio"),
            **dict.fromkeys(("wandb", "mlflow"), "track"),
            **dict.fromkeys(("chdb", "clickhouse_connect", "sqlglot", "matplotlib"), "analytics")}


def missing_extra(e: ModuleNotFoundError) -> str | None:
    """The one-line error for a role's package that is not installed; None for any other missing module."""
    top = (e.name or "").split(".")[0]
    if top not in EXTRA_OF:
        return None
    extras = EXTRA_OF[top].replace(" or ", "|").replace(", ", "|").split("|")
    return (f"this command needs {top!r}, which is not installed: install its role, pip install "
            f"'rftbus[{extras[0]}]'" + (f" (or {', '.join(extras[1:])})" if len(extras) > 1 else "") +
            ", or everything with 'rftbus[all]'")


def main() -> None:
    """Console-script entry: rftbus errors become one red line and exit code 1, never a traceback."""
    try:
        app()
    except RftbusError as e:
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True)
        sys.exit(1)
    except ModuleNotFoundError as e:
        line = missing_extra(e)
        if line is None:
            raise
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(line)}", soft_wrap=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
