"""A grade of a whole trace, written as the span an agent would write: an OTLP export of one span on that trace
carrying the grade attribute (what `rftbus serve` publishes for /v1/feedback `trace_id`). It goes to the spans topic
keyed by the trace id in hex, as the Collector keys a trace's spans, and with the same murmur2 partitioner
(collector.py sets it), so it meets the trace's calls in the traces stage's partition (rftbus/streams/traces/stage.py)."""

from __future__ import annotations

import hashlib
import time


def grade_export(trace_id: str, value: float, grade_id: str, attribute: str = "user.feedback",
                 annotator: str | None = None, service: str = "rftbus-serve") -> bytes:
    """The OTLP protobuf bytes of one grade span; its span id derives from `grade_id` (a retry is the same span)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    now = time.time_ns()
    attrs = [KeyValue(key=attribute, value=AnyValue(double_value=float(value)))]
    if annotator:
        attrs.append(KeyValue(key="rftbus.annotator", value=AnyValue(string_value=annotator)))
    span = Span(trace_id=bytes.fromhex(trace_id), span_id=hashlib.sha256(grade_id.encode()).digest()[:8],
                name="rftbus.feedback", start_time_unix_nano=now, end_time_unix_nano=now, attributes=attrs)
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value=service))])
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource,
                                                                  scope_spans=[ScopeSpans(spans=[span])])])
    return req.SerializeToString()
