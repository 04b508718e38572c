"""A real Schema Registry on this machine: Apicurio Registry (the official distribution from Maven Central,
`io.apicurio:apicurio-registry-app:<version>:zip:all`, a Quarkus app run with the JDK rftbus already needs),
serving the Confluent-compatible API at `http://<host>:<port>/apis/ccompat/v7` (what `schema_registry.url`
takes). In-memory storage: for tests and local work; a deployment runs the compose stack's registry.

Tried first: Karapace (not on PyPI as an installable package here: `pip download karapace` finds no
version) and the Confluent Schema Registry (not on Maven Central: Confluent's own repository, not reachable
here). Apicurio 3.0.9 starts in about 5 s here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from rftbus.ground.broker.java import find_java
from rftbus.ground.errors import RftbusError

APICURIO_VERSION = "3.0.9"
DONE = ".complete"


class RegistryError(RftbusError):
    pass


def ensure_apicurio(target: Path, version: str = APICURIO_VERSION) -> Path:
    """`target` holding the unpacked distribution (its runner jar and lib/), fetched by Maven once."""
    target = target.absolute()
    if (target / DONE).exists():
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise RegistryError("Maven (`mvn`) is needed once to fetch Apicurio Registry from Maven Central")
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [mvn, "-q", "-B", "dependency:unpack", f"-Dartifact=io.apicurio:apicurio-registry-app:{version}:zip:all",
           f"-DoutputDirectory={tmp}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0 or not list(tmp.glob("*-runner.jar")):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise RegistryError(f"Maven could not fetch Apicurio Registry {version}:\n{tail}")
    (tmp / DONE).write_text(version + "\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


@dataclass
class Registry:
    """A running Apicurio Registry process."""

    proc: subprocess.Popen
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """What `schema_registry.url` takes: the Confluent-compatible API."""
        return f"http://{self.host}:{self.port}/apis/ccompat/v7"

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_registry(home: Path, port: int, host: str = "127.0.0.1", heap: str = "256m",
                   timeout_s: float = 90.0) -> Registry:
    dist = ensure_apicurio(home / f"apicurio-{APICURIO_VERSION}")
    jar = next(dist.glob("*-runner.jar"))
    log = open(home / "apicurio.log", "ab")
    proc = subprocess.Popen([find_java().path, f"-Xmx{heap}", f"-Dquarkus.http.port={port}",
                             f"-Dquarkus.http.host={host}", "-jar", str(jar)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=dist, start_new_session=True,
                            env={**os.environ, "QUARKUS_LOG_LEVEL": "WARN"})
    log.close()
    reg = Registry(proc, port, host)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RegistryError(f"Apicurio Registry exited during start (code {proc.returncode}); see {home / 'apicurio.log'}")
        try:
            if httpx.get(reg.url + "/subjects", timeout=2).status_code == 200:
                return reg
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    reg.stop()
    raise RegistryError(f"Apicurio Registry did not answer within {timeout_s:g} s; see {home / 'apicurio.log'}")
