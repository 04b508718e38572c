"""A producer with a bounded in-flight budget: records go to Kafka and each caller gets a future that
resolves when Kafka acknowledged (acks=all, idempotent) or failed.

The budget counts encoded bytes handed to librdkafka and not yet acknowledged. A send that would
exceed it fails at once (BufferFull -> 503), so an outage fills a bounded buffer and then refuses
loudly instead of growing without limit. A poll thread serves delivery callbacks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from confluent_kafka import KafkaException, Producer

log = logging.getLogger("rftbus.serve")


class BufferFull(Exception):
    """The record would push unacknowledged bytes past the budget."""


class DeliveryFailed(Exception):
    """Kafka did not take the record (timeout, broker error)."""


class Recorder:
    def __init__(self, producer: Producer, max_bytes: int, name: str, report: Callable[[str], None] = log.error):
        self.producer, self.max_bytes, self.name, self.report = producer, max_bytes, name, report
        self._lock = threading.Lock()
        self.inflight_bytes = 0
        self.inflight = 0
        self.delivered = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"serve-{name}-acks", daemon=True)

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def send_many(self, records: list[tuple[str, bytes | str | None, bytes]]) -> list[Future]:
        """Hand (topic, key, value) records to Kafka; each future's result is (partition, offset) once
        acknowledged. All or none: the budget is checked for the whole batch, so a
        group (or a feedback and its expert record) is never half-sent because the buffer filled up."""
        sizes = [len(v) + (len(k) if k else 0) for _, k, v in records]
        with self._lock:
            if self.inflight_bytes + sum(sizes) > self.max_bytes:
                raise BufferFull(f"{self.name} buffer full: {self.inflight_bytes} of {self.max_bytes} bytes are "
                                 f"waiting for Kafka's acknowledgement")
            self.inflight_bytes += sum(sizes)
            self.inflight += len(records)
        futs = []
        for i, ((topic, key, value), size) in enumerate(zip(records, sizes)):
            fut: Future = Future()
            fut.set_running_or_notify_cancel()  # a caller that gives up cannot cancel it under the callback
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=self._callback(topic, size, fut))
            except (BufferError, KafkaException) as e:
                left = sizes[i:]
                with self._lock:
                    self.inflight_bytes -= sum(left)
                    self.inflight -= len(left)
                raise BufferFull(f"{self.name}: librdkafka refused the record ({e})") from None
            futs.append(fut)
        return futs

    def _callback(self, topic: str, size: int, fut: Future):
        def on_delivery(err, msg) -> None:
            with self._lock:
                self.inflight_bytes -= size
                self.inflight -= 1
                if err is None:
                    self.delivered += 1
                else:
                    self.failed += 1
            if err is None:
                fut.set_result((msg.partition(), msg.offset()))
            else:
                fut.set_exception(DeliveryFailed(f"{topic}: {err.str()}"))
        return on_delivery

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.1)

    def close(self, timeout_s: float) -> int:
        """Flush what is buffered; returns (and reports) how many records Kafka never acknowledged."""
        self._stop.set()
        self._thread.join(timeout=5)
        left = self.producer.flush(timeout_s)
        if left:
            self.report(f"{self.name}: {left} record(s) were not acknowledged by Kafka within {timeout_s:g}s "
                        f"of shutdown and are lost")
        return left

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {f"{self.name}_delivered": self.delivered, f"{self.name}_failed": self.failed,
                    f"{self.name}_inflight": self.inflight, f"{self.name}_inflight_bytes": self.inflight_bytes}
