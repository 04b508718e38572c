"""Building the OpenTelemetry Collector from its Go modules with its own builder (ocb), once per machine and
release: builder-config.yaml beside this file names the modules; the binary is cached like the Kafka jars."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import yaml
from rich.console import Console

from rftbus.ground.errors import RftbusError
from rftbus.ground.once import once

BUILDER = "go.opentelemetry.io/collector/cmd/builder"
DONE_MARKER = ".complete"


class CollectorBuildError(RftbusError):
    pass


def builder_config() -> dict:
    return yaml.safe_load((resources.files("rftbus.ground.otel") / "builder-config.yaml").read_text())


def release() -> str:
    """The Collector release the builder config pins (every core module at it)."""
    return str(builder_config()["dist"]["version"])


def binary_path(cache_dir: Path) -> Path:
    return cache_dir.absolute() / f"otelcol-rftbus-{release()}" / "otelcol-rftbus"


def ensure_collector(cache_dir: Path, console: Console | None = None) -> Path:
    """The Collector binary under `cache_dir`, built first if it is not there yet (minutes, once). Processes that
    need it at once (test workers) build once: one holds a file lock, the others wait and find it built."""
    binary = binary_path(cache_dir)
    once(binary.parent, DONE_MARKER, lambda: _build(binary, console))
    return binary


def _build(binary: Path, console: Console | None) -> Path:
    go = shutil.which("go")
    if not go:
        raise CollectorBuildError("Go (`go`, 1.24 or newer) is needed once to build the OpenTelemetry Collector from "
                                  "its modules (https://go.dev/dl/); or set otel.collector_binary to a Collector "
                                  "that has the OTLP receiver and the Kafka exporter (otelcol-contrib has both)")
    out = binary.parent
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cfg = builder_config()
    cfg["dist"]["output_path"] = str(tmp)
    (tmp / "builder-config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    if console:
        console.print(f"building the OpenTelemetry Collector {release()} from its Go modules (once, a few minutes) ...")
    env = {**os.environ, "CGO_ENABLED": "0"}
    cmd = [go, "run", f"{BUILDER}@v{release()}", "--config", str(tmp / "builder-config.yaml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    built = tmp / "otelcol-rftbus"
    if proc.returncode != 0 or not built.is_file():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise CollectorBuildError(f"the Collector build failed (its sources stay in {tmp}):\n{tail}")
    for item in tmp.iterdir():  # the generated sources and go.sum stay beside the binary: what it was built from
        if item.suffix not in (".go", ".mod", ".sum", ".yaml") and item != built:
            shutil.rmtree(item, ignore_errors=True) if item.is_dir() else item.unlink()
    (tmp / DONE_MARKER).write_text(f"{release()}\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return binary
