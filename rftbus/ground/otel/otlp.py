"""OTLP trace bodies (what the Collector's Kafka exporter writes with `encoding: otlp_proto`, and what an agent
POSTs to /v1/traces as protobuf or JSON) decoded to plain spans, by the OpenTelemetry project's own protobuf
classes (opentelemetry-proto): a span's attributes as Python values, ids as lowercase hex."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import ParseDict, ParseError
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from rftbus.ground.errors import RftbusError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class OtlpError(RftbusError):
    """A body that is not an OTLP trace export (the reason names what was wrong)."""


@dataclass(slots=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)  # the resource's attributes (service.name, ...)
    status_code: int = 0  # 0 unset, 1 ok, 2 error


def value(v: AnyValue) -> Any:
    """An OTLP AnyValue as Python: str, bool, int, float, bytes, list or dict (None when unset)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


def is_json(content_type: str) -> bool:
    """Whether an OTLP/HTTP body of this Content-Type is OTLP/JSON (else protobuf)."""
    return content_type.split(";")[0].strip().lower() == JSON


def parse(body: bytes, content_type: str = PROTOBUF) -> ExportTraceServiceRequest:
    """The export request in `body`: protobuf (the Collector's otlp_proto, OTLP/HTTP's default) or OTLP/JSON."""
    req = ExportTraceServiceRequest()
    if is_json(content_type):
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise OtlpError(f"an OTLP/JSON body that is not JSON ({e})") from None
        if not isinstance(data, dict):
            raise OtlpError(f"an OTLP/JSON body must be an object, not {type(data).__name__}")
        try:
            ParseDict(_hex_ids_to_base64(data), req)
        except (ParseError, ValueError, TypeError) as e:
            raise OtlpError(f"not an OTLP trace export: {str(e).splitlines()[0][:300]}") from None
        return req
    try:
        req.ParseFromString(body)
    except (DecodeError, ValueError) as e:
        raise OtlpError(f"not an OTLP protobuf trace export ({e})") from None
    return req


def spans(req: ExportTraceServiceRequest) -> list[Span]:
    out = []
    for rs in req.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(Span(
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_span_id=s.parent_span_id.hex(),
                    name=s.name, start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                    attributes=attributes(s.attributes), resource=resource, status_code=s.status.code,
                    events=[SpanEvent(e.name, e.time_unix_nano, attributes(e.attributes)) for e in s.events]))
    return out


def _hex_ids_to_base64(data: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex (the spec), protobuf's JSON mapping reads bytes as base64."""
    import base64

    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            if k in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id") \
                    and isinstance(v, str):
                try:
                    out[k] = base64.b64encode(bytes.fromhex(v)).decode()
                except ValueError:
                    raise OtlpError(f"{k} {v!r:.40} is not hex") from None
            else:
                out[k] = _hex_ids_to_base64(v)
        return out
    if isinstance(data, list):
        return [_hex_ids_to_base64(x) for x in data]
    return data


def by_trace(req: ExportTraceServiceRequest) -> list[tuple[str, bytes]]:
    """An export split into one per trace, as the Collector's Kafka exporter writes them (`partition_traces_by_id`):
    (trace id in hex, the OTLP protobuf bytes of that trace's spans, each under its own resource and scope)."""
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

    out: dict[str, ExportTraceServiceRequest] = {}
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                one = out.setdefault(span.trace_id.hex(), ExportTraceServiceRequest())
                if not one.resource_spans or one.resource_spans[-1].resource != rs.resource:
                    one.resource_spans.append(ResourceSpans(resource=rs.resource, schema_url=rs.schema_url))
                last = one.resource_spans[-1]
                if not last.scope_spans or last.scope_spans[-1].scope != ss.scope:
                    last.scope_spans.append(ScopeSpans(scope=ss.scope, schema_url=ss.schema_url))
                last.scope_spans[-1].spans.append(span)
    return [(t, r.SerializeToString()) for t, r in out.items()]


def export_response(content_type: str) -> tuple[bytes, str]:
    """The OTLP/HTTP success answer in the request's encoding (an empty ExportTraceServiceResponse)."""
    if is_json(content_type):
        return b"{}", JSON
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return ExportTraceServiceResponse().SerializeToString(), PROTOBUF
