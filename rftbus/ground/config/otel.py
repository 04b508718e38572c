"""The `otel:` config section: agents' OpenTelemetry traces as experiences (pydantic only: no heavy imports)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class OtelConfig(BaseModel):
    """Agents' OpenTelemetry traces: the Collector `rftbus run` starts, and what the streams read of the spans."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(False, description="the streams read topics.spans (OTLP protobuf, as the Collector's "
                          "Kafka exporter writes it) and turn GenAI spans into experience groups; implied by "
                          "`collector`")
    collector: bool = Field(False, description="`rftbus run` starts an OpenTelemetry Collector (OTLP receiver, "
                            "Kafka exporter to topics.spans), built once from its Go modules (rftbus/ground/otel/)")
    collector_binary: Path | None = Field(None, description="a Collector to run instead of building one: any with "
                                          "the OTLP receiver and the Kafka exporter (otelcol-contrib has both)")
    cache_dir: Path | None = Field(None, description="where the built Collector is kept (built once, minutes, with "
                                   "Go); default <state_dir>/otelcol")
    host: str = Field("127.0.0.1", description="the Collector's OTLP listen address (0.0.0.0 for remote agents)")
    http_port: int = Field(4318, ge=1, le=65535, description="OTLP/HTTP port (agents POST /v1/traces here)")
    grpc_port: int = Field(4317, ge=1, le=65535, description="OTLP/gRPC port")
    grade_attribute: str = Field("user.feedback", min_length=1, description="a span attribute (or a span event of "
                                 "this name, its `value`) holding a grade: a number, a bool, up or down. On the "
                                 "model call's span it grades that answer; on another span of the trace it grades "
                                 "the trace's root model call")
    session_attribute: str | None = Field(None, description="a span attribute recorded as the episode's session "
                                          "(group metadata `session`); the trace is the unit that is graded")

    @property
    def reads_traces(self) -> bool:
        return self.enabled or self.collector
