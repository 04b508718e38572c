"""The OpenTelemetry Collector rftbus builds and starts (`otel.collector: true`): agents send OTLP traces to it,
its Kafka exporter writes them to the spans topic (rftbus/streams/traces reads them)."""
