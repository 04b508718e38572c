"""Fetching the official Kafka broker jars with Maven (pom.xml beside this file), cached per version."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

from rich.console import Console

from rftbus.ground.errors import RftbusError
from rftbus.ground.once import once

DONE_MARKER = ".complete"


class JarsError(RftbusError):
    pass


def ensure_jars(target: Path, kafka_version: str, console: Console | None = None) -> Path:
    """Return `target` holding the broker's classpath, running Maven only if it is not complete yet. Processes
    that start brokers at once (test workers, a cluster's nodes) fetch once: one holds a file lock, the others
    wait for it and find the jars there."""
    target = target.absolute()  # Maven resolves relative paths against the pom's folder
    once(target, DONE_MARKER, lambda: _fetch(target, kafka_version, console))
    return target


def _fetch(target: Path, kafka_version: str, console: Console | None) -> Path:
    mvn = shutil.which("mvn")
    if not mvn:
        raise JarsError(
            "Maven (`mvn`) is needed once to fetch the Apache Kafka jars from Maven Central; "
            "install it (e.g. `apt-get install maven`)"
        )
    pom = resources.files("rftbus.ground.broker") / "pom.xml"
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [
        mvn, "-q", "-B", "-f", str(pom), f"-Dkafka.version={kafka_version}",
        "dependency:copy-dependencies", f"-DoutputDirectory={tmp}", "-DincludeScope=runtime",
    ]
    if console:
        console.print(f"fetching Apache Kafka {kafka_version} jars from Maven Central (once) ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    jars = list(tmp.glob("*.jar"))
    if proc.returncode != 0 or not any(j.name.startswith("kafka_2.13-") for j in jars):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise JarsError(f"Maven could not fetch Apache Kafka {kafka_version}:\n{tail}")
    (tmp / DONE_MARKER).write_text(f"{kafka_version}\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target
