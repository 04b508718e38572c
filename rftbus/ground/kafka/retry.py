"""Which Kafka errors are worth asking again, and the one loop that does: a fresh broker answers
NOT_COORDINATOR for a while, a frozen one times out (#37), and librdkafka (since 2.10, confluentinc/librdkafka
#4557) destroys the handle of a broker a metadata answer left out, failing its requests in flight with
_DESTROY_BROKER: on a cluster that is starting, a node's answer can omit a node that has not registered yet."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from rftbus.ground.errors import RftbusError

T = TypeVar("T")
TRANSIENT = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
             KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,  # a leader elected meanwhile
             KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT)


def retriable(err: KafkaError | None) -> bool:
    return err is not None and hasattr(err, "retriable") and (err.retriable() or err.code() in TRANSIENT)


def retrying(fn: Callable[[], T], timeout_s: float, also: tuple[int, ...] = (), pause_s: float = 0.5) -> T:
    """Run `fn`, asking again on retriable Kafka errors (and the error codes in `also`) until `timeout_s`; the
    last KafkaException is raised as it came. The one retry-until-deadline loop of the Kafka layer."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            again = retriable(err) or (err is not None and hasattr(err, "code") and err.code() in also)
            if not again or time.monotonic() > deadline:
                raise
            time.sleep(pause_s)


def retry_kafka(fn: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """`retrying`, then a clear error naming `what`."""
    try:
        return retrying(fn, timeout_s)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        raise RftbusError(f"{what}: {err.str() if err is not None else e}") from None
