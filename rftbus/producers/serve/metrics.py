"""What an operator scrapes from `rftbus serve` (/metrics): request latency and time to first token, tokens
generated (rate() gives tokens/s), requests by endpoint and status, rejections by reason (429s included), the
weight version served, feedback by kind, records waiting for Kafka."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rftbus.ground.metrics import LATENCY_BUCKETS


class ServeMetrics:
    def __init__(self, version: Callable[[], float], inflight: Callable[[], float]):
        r = self.registry = CollectorRegistry()
        self.latency = Histogram("rftbus_serve_request_seconds", "a completion request, received to last byte",
                                 ["endpoint", "stream"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("rftbus_serve_time_to_first_token_seconds", "a streamed request, received to its "
                              "first token", ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.completion_tokens = Counter("rftbus_serve_completion_tokens", "tokens generated", registry=r)
        self.prompt_tokens = Counter("rftbus_serve_prompt_tokens", "prompt tokens read", registry=r)
        self.requests = Counter("rftbus_serve_requests", "answered requests", ["endpoint", "status"], registry=r)
        self.rejections = Counter("rftbus_serve_rejections", "requests refused, by reason (the error code)",
                                  ["reason"], registry=r)
        self.feedback = Counter("rftbus_serve_feedback", "feedback records published, by kind", ["kind"], registry=r)
        Gauge("rftbus_serve_model_version", "the weight version answers are generated with",
              registry=r).set_function(version)
        Gauge("rftbus_serve_records_inflight", "records handed to Kafka, not yet acknowledged",
              registry=r).set_function(inflight)

    def rejected(self, status: int, code: str | None) -> None:
        self.rejections.labels(code or str(status)).inc()
