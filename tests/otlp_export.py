"""Spans made with the real OpenTelemetry SDK, exported as the OTLP/protobuf body a Collector or an SDK's OTLP
exporter sends: the one helper the span-reading tests build their input with."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def otlp_body(make: Callable[[Tracer], object], tracer_name: str = "agent") -> bytes:
    """`make(tracer)` records spans; their OTLP ExportTraceServiceRequest bytes."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    make(provider.get_tracer(tracer_name))
    return encode_spans(exporter.get_finished_spans()).SerializeToString()
