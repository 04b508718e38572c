"""Routing what the trainer will not train to the rejected topic (stage `trainer`).

The rejection id is derived from where the record was read, so a rejection produced again after
a crash (before its offset reached a checkpoint) is recognisably the same rejection.
"""

from __future__ import annotations

import hashlib

from rftbus.schemas import Rejection


def rejection_id(topic: str, partition: int, offset: int, reason: str) -> str:
    return hashlib.sha1(f"trainer\x00{topic}\x00{partition}\x00{offset}\x00{reason}".encode()).hexdigest()[:32]


class Rejector:
    def __init__(self, producer, serializer, topic: str):
        self.producer = producer
        self.serialize = serializer
        self.topic = topic
        self.count: dict[str, int] = {}

    def __call__(self, topic: str, partition: int, offset: int, key: bytes | None, original: bytes,
                 reason: str, detail: str, experience_id: str | None = None) -> None:
        rec = Rejection(rejection_id=rejection_id(topic, partition, offset, reason), experience_id=experience_id,
                        reason=reason, detail=detail, stage="trainer", source_topic=topic, partition=partition,
                        offset=offset, original=original)
        self.producer.produce(self.topic, key=key, value=self.serialize(rec, None))
        self.producer.poll(0)
        self.count[reason] = self.count.get(reason, 0) + 1

    def flush(self, timeout: float = 30.0) -> None:
        """Rejections must be on the broker before their offsets are checkpointed."""
        left = self.producer.flush(timeout)
        if left:
            raise RuntimeError(f"{left} rejection(s) not acknowledged by the broker within {timeout}s")
