"""Which Kafka errors are worth asking again, and the one loop that does: a fresh broker answers
NOT_COORDINATOR for a while, a frozen one times out (#37), and librdkafka (since 2.10, confluentinc/librdkafka
#4557) destroys the handle of a broker a metadata answer left out, failing its requests in flight with
_DESTROY_BROKER: on a cluster that is starting, a node's answer can omit a node that has not registered yet."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from rftbus.errors import RftbusError

T = TypeVar("T")
TRANSIENT = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
             KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,  # a leader elected meanwhile
             KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT)


def retriable(err: KafkaError | None) -> bool:
    return err is not None and hasattr(err, "retriable") and (err.retriable() or err.code() in TRANSIENT)


def retry_kafka(fn: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """Run `fn`, retrying retriable Kafka errors until `timeout_s`; then a clear error naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if not retriable(err) or time.monotonic() > deadline:
                raise RftbusError(f"{what}: {err.str() if err is not None else e}") from None
            time.sleep(0.5)
