"""The configuration rftbus gives the OpenTelemetry Collector (rftbus/otel/collector.py) and the builder's pins
(rftbus/otel/builder-config.yaml): one traces pipeline, OTLP over HTTP and gRPC in, the Kafka exporter out with
otlp_proto keyed by trace id; every module at one release. No broker (the Collector itself: tests/integration)."""

from __future__ import annotations

from rftbus.otel.build import binary_path, builder_config, release
from rftbus.otel.collector import CollectorSpec, collector_config


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
