"""Committed offsets of consumer groups, read through a Consumer, never the AdminClient.

librdkafka's admin ListConsumerGroupOffsets dereferences a NULL group handle when the broker answers
NOT_COORDINATOR (confluentinc/librdkafka#5040, open; librdkafka 2.14.2 here), and the process dies
with SIGSEGV: the first query of a new group on a fresh broker does it, and so does a query while a
restarted broker is still loading its coordinators (the explorer's crash after a broker restart in
`make chaos`). A consumer configured with the group's id but never subscribed does not join the
group; its `committed()` goes through its own group handle, which re-queries the coordinator instead.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer


class CommittedOffsets:
    """One idle consumer per group, made on first use and kept (a lag view asks every few seconds)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._consumers: dict[str, Consumer] = {}

    def __call__(self, group: str, tps: list[TopicPartition], timeout: float = 10.0) -> dict[tuple[str, int], int]:
        """(topic, partition) -> committed offset, or a negative offset where the group has none.

        Raises KafkaException when the coordinator does not answer within `timeout`."""
        if not tps:
            return {}
        consumer = self._consumers.get(group)
        if consumer is None:
            consumer = self._consumers[group] = make_consumer(self.cfg, group)
        return {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(tps, timeout=timeout)}

    def close(self) -> None:
        for c in self._consumers.values():
            c.close()
        self._consumers.clear()

    def __enter__(self) -> CommittedOffsets:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
