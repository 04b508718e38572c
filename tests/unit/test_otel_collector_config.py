"""The configuration rftbus gives the OpenTelemetry Collector (rftbus/ground/otel/collector.py) and the builder's pins
(rftbus/ground/otel/builder-config.yaml): one traces pipeline, OTLP over HTTP and gRPC in, the Kafka exporter out with
otlp_proto keyed by trace id; every module at one release. No broker (the Collector itself: tests/integration)."""

from __future__ import annotations

from rftbus.ground.otel.build import binary_path, builder_config, release
from rftbus.ground.otel.collector import CollectorSpec, collector_config


def test_one_traces_pipeline_from_otlp_to_kafka_keyed_by_trace_id():
    c = collector_config(CollectorSpec(brokers=["127.0.0.1:9092"], topic="rft.spans", http_port=14318,
                                       grpc_port=14317))
    assert c["service"]["pipelines"] == {"traces": {"receivers": ["otlp"], "processors": ["batch"],
                                                     "exporters": ["kafka"]}}
    assert c["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "127.0.0.1:14318"
    kafka = c["exporters"]["kafka"]
    assert kafka["traces"] == {"topic": "rft.spans", "encoding": "otlp_proto"} and kafka["partition_traces_by_id"]


def test_the_builder_pins_every_module_at_one_release(tmp_path):
    cfg = builder_config()
    mods = [m["gomod"] for kind in ("receivers", "processors", "exporters", "providers") for m in cfg[kind]]
    core = [m for m in mods if m.startswith("go.opentelemetry.io/collector/") and "/confmap/" not in m]
    assert core and all(m.endswith(f" v{release()}") for m in core), core
    contrib = [m for m in mods if "opentelemetry-collector-contrib" in m]
    assert contrib and all(m.rsplit(" v", 1)[1].startswith(release().rsplit(".", 1)[0]) for m in contrib), contrib
    assert binary_path(tmp_path).name == "otelcol-rftbus" and release() in binary_path(tmp_path).parent.name


def test_spans_are_partitioned_as_every_rftbus_producer_partitions():
    """murmur2 (Kafka's), not the exporter's default Sarama FNV-1a: a grade serve writes for a trace (keyed by its hex
    id, rftbus/ground/otel/grade.py) must land in the partition of the trace's spans, where the traces stage joins them."""
    kafka = collector_config(CollectorSpec(brokers=["b:9092"], topic="t"))["exporters"]["kafka"]
    assert kafka["record_partitioner"] == {"sticky_key": {"hasher": "murmur2"}}


def test_the_compose_collector_config_is_what_rftbus_generates():
    """deploy/otelcol.yaml (docker-compose's `otelcol` service) is `collector_config` for the compose broker."""
    import yaml

    from tests.conftest import REPO

    shipped = yaml.safe_load((REPO / "deploy" / "otelcol.yaml").read_text())
    assert shipped == collector_config(CollectorSpec(brokers=["kafka:9092"], topic="rft.spans", host="0.0.0.0")), \
        "regenerate deploy/otelcol.yaml (see its header)"
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert compose["services"]["otelcol"]["image"].endswith(":" + release())


def test_check_says_in_one_line_when_run_could_not_start_the_collector(tmp_path, monkeypatch):
    """otel.collector on a machine with no Collector built and no Go: `rftbus check` refuses it, naming both ways
    out; a collector_binary that is not there is named."""
    from rftbus.ground.config import load_config
    from rftbus.apps.run.check import Report, check_otel

    monkeypatch.setenv("PATH", str(tmp_path))  # (no `go` on it)
    cfg = load_config(overrides={"state_dir": str(tmp_path), "otel": {"collector": True}}, environ={})
    rep = Report()
    check_otel(cfg, rep)
    assert len(rep.errors) == 1 and "no Go toolchain" in rep.errors[0] and "collector_binary" in rep.errors[0]
    cfg = load_config(overrides={"state_dir": str(tmp_path), "otel": {"collector": True,
                                                                      "collector_binary": str(tmp_path / "nope")}},
                      environ={})
    rep = Report()
    check_otel(cfg, rep)
    assert rep.errors == [f"otel.collector_binary {str(tmp_path / 'nope')!r}: no such file"]


def test_a_secured_broker_gives_the_collector_its_role_login_by_the_environment():
    """rftbus run's embedded broker takes SASL users per role: the Collector logs in as the `otel` role, its
    password by an environment variable, never written in the YAML."""
    from rftbus.ground.otel.collector import PASSWORD_ENV

    spec = CollectorSpec.for_client({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                                     "sasl.username": "rftbus-otel", "sasl.password": "s3cret"},
                                    brokers=["b:9092"], topic="t")
    c = collector_config(spec)
    assert c["exporters"]["kafka"]["auth"] == {"sasl": {"username": "rftbus-otel", "mechanism": "PLAIN",
                                                        "password": "${env:%s}" % PASSWORD_ENV}}
    assert "s3cret" not in str(c) and "tls" not in c["exporters"]["kafka"]
    assert "auth" not in collector_config(CollectorSpec.for_client({}, brokers=["b:9092"], topic="t"))["exporters"]["kafka"]
