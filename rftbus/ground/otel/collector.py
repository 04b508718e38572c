"""Running the OpenTelemetry Collector: the configuration rftbus gives it (OTLP over HTTP and gRPC in, batched,
the Kafka exporter out with `encoding: otlp_proto`, keyed by trace id so a trace's spans meet in one partition)
and the process, started and stopped like the broker's nodes."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from rftbus.ground.errors import RftbusError


@dataclass(frozen=True)
class CollectorSpec:
    brokers: list[str]
    topic: str
    host: str = "127.0.0.1"
    http_port: int = 4318
    grpc_port: int = 4317
    health_port: int | None = None  # (the Collector's own metrics endpoint: up when it answers)
    sasl_username: str | None = None  # SASL to the brokers (rftbus run's secured broker: the `otel` role's user)
    sasl_mechanism: str = "PLAIN"
    tls: bool = False  # SASL_SSL / SSL

    @classmethod
    def for_client(cls, client: dict, **kw) -> CollectorSpec:
        """A spec whose Kafka login is what librdkafka's `client` settings say (kafka.client)."""
        protocol = str(client.get("security.protocol", "PLAINTEXT")).upper()
        user = client.get("sasl.username")
        return cls(**kw, sasl_username=str(user) if user else None, tls=protocol.endswith("SSL"),
                   sasl_mechanism=str(client.get("sasl.mechanism", client.get("sasl.mechanisms", "PLAIN"))))


PASSWORD_ENV = "RFTBUS_OTELCOL_KAFKA_PASSWORD"  # the SASL password reaches the Collector by its environment only


def collector_config(spec: CollectorSpec) -> dict:
    """The Collector's YAML as a dict: one traces pipeline, OTLP -> batch -> Kafka (logged in as `spec` says)."""
    kafka: dict = {
        "brokers": spec.brokers,
        "traces": {"topic": spec.topic, "encoding": "otlp_proto"},
        "partition_traces_by_id": True,
        # Kafka's own murmur2 (the Java client's and every rftbus producer's), not Sarama's FNV-1a: a grade
        # another producer writes for a trace lands in its spans' partition (rftbus/ground/otel/grade.py)
        "record_partitioner": {"sticky_key": {"hasher": "murmur2"}},
        "producer": {"compression": "lz4"}}
    if spec.sasl_username:
        kafka["auth"] = {"sasl": {"username": spec.sasl_username, "password": "${env:%s}" % PASSWORD_ENV,
                                  "mechanism": spec.sasl_mechanism}}
    if spec.tls:
        kafka["tls"] = {"insecure": False}
    return {
        "receivers": {"otlp": {"protocols": {
            "http": {"endpoint": f"{spec.host}:{spec.http_port}"},
            "grpc": {"endpoint": f"{spec.host}:{spec.grpc_port}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"kafka": kafka},
        "service": {
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["kafka"]}},
            "telemetry": {"logs": {"level": "warn"},
                          "metrics": {"level": "none"} if spec.health_port is None else {
                              "readers": [{"pull": {"exporter": {"prometheus": {
                                  "host": spec.host, "port": spec.health_port}}}}]}}},
    }


class Collector:
    """One Collector process on `binary` with `spec`'s configuration, its log in `folder`."""

    def __init__(self, binary: Path, spec: CollectorSpec, folder: Path):
        self.binary, self.spec, self.folder = binary, spec, folder
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> Collector:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "otelcol.yaml"
        config.write_text(yaml.safe_dump(collector_config(self.spec), sort_keys=False))
        self.log = open(self.folder / "otelcol.log", "ab")
        self.proc = subprocess.Popen([str(self.binary), "--config", f"file:{config}"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # up when the OTLP/HTTP receiver answers
            if self.proc.poll() is not None:
                raise RftbusError(f"the OpenTelemetry Collector exited {self.proc.returncode} at start; see "
                                  f"{self.folder / 'otelcol.log'}")
            try:
                urllib.request.urlopen(f"http://{self.spec.host}:{self.spec.http_port}/v1/traces", timeout=1)
            except urllib.error.HTTPError:
                return self  # (a GET is refused with 405: the receiver is listening)
            except OSError:
                time.sleep(0.2)
                continue
            return self
        self.stop()
        raise RftbusError(f"the OpenTelemetry Collector did not listen on {self.spec.host}:{self.spec.http_port} "
                          f"in {timeout_s:g} s; see {self.folder / 'otelcol.log'}")

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (the Collector flushes its batch and its exporter), SIGKILL after `grace_s`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None) is not None:
            self.log.close()
