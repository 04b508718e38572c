"""Reading helpers: what is ready now without waiting for more (consumers on a hot path), and a bounded
stretch of a topic read to where it ends now (reports, recovery scans, rebuilds, tests, benchmarks).

`read_to_end` is the one loop that reads a topic to an end: every other module that needs "everything
from here to there" calls it, so end detection (watermarks, EOF, transaction markers) lives in one place.
"""

from __future__ import annotations

import time
from functools import partial
from collections.abc import Iterable, Iterator

from confluent_kafka import KafkaError, Message, TopicPartition

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer
from rftbus.ground.kafka.retry import retrying


def consume_ready(consumer, max_messages: int, timeout: float) -> list[Message]:
    """Up to `max_messages`, waiting at most `timeout` for the first and not at all for the rest.

    `consume(n, t)` waits until it has n messages or t has passed, so a consumer that needs only what
    is there (the trainer's next batch, the next weight version) would wait out t on every call.
    """
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=max_messages - 1, timeout=0)] if max_messages > 1 else [first]


def read_to_end(cfg: Config, topic: str, *, partitions: Iterable[int] | None = None, since_ms: int | None = None,
                start: dict[int, int] | None = None, until: dict[int, int] | None = None, timeout_s: float = 60.0,
                poll_s: float = 0.5, strict: bool = True, consumer=None) -> Iterator[Message]:
    """Every message of `topic` from its beginning (or the first at/after `since_ms`, or the offset in `start`)
    up to where each partition ends now (or the offset in `until`, exclusive), in offset order per partition.

    Uses assign() with no group membership and commits nothing. If the ends are not reached within
    `timeout_s`, `strict` raises TimeoutError (a report must not silently count a partial topic);
    otherwise it stops with what it has (a test polling until records arrive). A missing topic yields
    nothing. `consumer` (assign-only, `enable.partition.eof` on) is reused when given, else one is made.
    """
    own = consumer is None
    c = consumer or make_consumer(cfg, "rftbus-read-to-end", **{"enable.partition.eof": True})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            return
        parts = sorted(md.partitions if partitions is None else partitions)
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in parts:
            # (asked again while a failover answers NOT_LEADER: a 3-node chaos run's settle stopped on it)
            tp = TopicPartition(topic, p)
            low, high = retrying(partial(c.get_watermark_offsets, tp, timeout=10), 60.0)
            ends[p] = min(high, until[p]) if until is not None and p in until else high
            starts[p] = max(low, start[p]) if start is not None and p in start else low
        if since_ms is not None:
            found = c.offsets_for_times([TopicPartition(topic, p, max(0, since_ms)) for p in parts], timeout=10)
            starts.update({tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found})
        todo = {p for p in parts if starts[p] < ends[p]}
        if not todo:
            return
        assigned = [TopicPartition(topic, p, starts[p]) for p in sorted(todo)]
        c.assign(assigned)
        c.resume(assigned)  # a reused consumer: librdkafka keeps a partition paused (below) across assignments
        deadline = time.monotonic() + timeout_s

        def done(p: int) -> None:
            todo.discard(p)
            c.pause([TopicPartition(topic, p)])  # its end is reached: fetch only the others

        while todo:
            if time.monotonic() > deadline:
                if strict:
                    raise TimeoutError(f"reading {topic}: not at its end after {timeout_s:g}s")
                return
            msg = c.poll(poll_s)
            if msg is None:
                continue
            p, off, err = msg.partition() or 0, msg.offset(), msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if p in todo:
                        done(p)
                    continue
                raise RuntimeError(f"reading {topic}: {err.str()}")
            if p not in todo or off is None:
                continue
            if off >= ends[p]:  # past the end asked for (the record at end-1 was a marker)
                done(p)
                continue
            if off >= ends[p] - 1:
                done(p)
            yield msg
    finally:
        if own:
            c.close()
        else:
            c.unassign()
