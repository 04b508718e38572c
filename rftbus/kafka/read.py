"""Reading helpers: what is ready now without waiting for more (consumers on a hot path), and a whole
topic from its beginning to where it ends now (reports, tests, benchmarks)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from rftbus.config import Config
from rftbus.kafka.clients import make_consumer


def consume_ready(consumer, max_messages: int, timeout: float) -> list[Message]:
    """Up to `max_messages`, waiting at most `timeout` for the first and not at all for the rest.

    `consume(n, t)` waits until it has n messages or t has passed, so a consumer that needs only what
    is there (the trainer's next batch, the next weight version) would wait out t on every call.
    """
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=max_messages - 1, timeout=0)] if max_messages > 1 else [first]


def read_to_end(cfg: Config, topic: str, *, timeout_s: float = 60.0, poll_s: float = 0.5,
                strict: bool = True) -> Iterator[Message]:
    """Every message of `topic` up to each partition's current end, in partition/offset order per partition.

    Uses assign() with no group membership and commits nothing. If the end is not reached within
    `timeout_s`, `strict` raises TimeoutError (a report must not silently count a partial topic);
    otherwise it stops with what it has (a test polling until records arrive).
    """
    consumer = make_consumer(cfg, "rftbus-read-to-end", **{"enable.partition.eof": True})
    try:
        md = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            return
        parts = sorted(md.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                if strict:
                    raise TimeoutError(f"reading {topic}: not at its end after {timeout_s:g}s")
                return
            msg = consumer.poll(poll_s)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {msg.error().str()}")
            at_end.discard(msg.partition())
            yield msg
    finally:
        consumer.close()
