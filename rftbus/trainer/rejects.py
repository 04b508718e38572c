"""Routing what the trainer will not train to the rejected topic (stage `trainer`; `trainer@<lineage>` for another
trainer on the same stream, whose books are its own: rftbus/ground/models/lineage.py).

The rejection id is derived from where the record was read and why, so a rejection produced again
after a crash (before its offset reached a checkpoint) is recognisably the same rejection.
"""

from __future__ import annotations

import hashlib

from rftbus.ground.kafka.in_flight import InFlight
from rftbus.trainer.batch_source import Polled
from rftbus.ground.schemas import REJECTION_MAX_BYTES, bound_key, fitted_rejection, topic_context

ORIGINAL_MAX_BYTES = 512 * 1024  # a rejection must fit the rejected topic; bigger originals are referenced


def rejection_id(topic: str, partition: int, offset: int, reason: str, stage: str = "trainer") -> str:
    return hashlib.sha1(f"{stage}\x00{topic}\x00{partition}\x00{offset}\x00{reason}".encode()).hexdigest()[:32]


class Rejector:
    def __init__(self, producer, serializer, topic: str, stage: str = "trainer"):
        self.producer, self.stage = producer, stage
        self.serialize = serializer
        self.topic = topic
        self.count: dict[str, int] = {}
        self.in_flight = InFlight("rejection")

    def __call__(self, r: Polled, reason: str, detail: str, experience_ids: list[str], evidence: bool = False) -> None:
        """Reject (some samples of) record `r`. With `evidence` the bytes are copied when they fit;
        otherwise the rejection points at the record (topic, partition, offset)."""
        original = r.raw if evidence and len(r.raw) <= ORIGINAL_MAX_BYTES else None
        # Bounded by construction (rftbus/ground/schemas/bounds.py): a multi-MB id or key in the record must not make its
        # rejection too large to write, which crash-looped the trainer (#36).
        rec = fitted_rejection(max_bytes=REJECTION_MAX_BYTES, original=original,
                               rejection_id=rejection_id(r.topic, r.partition, r.offset, reason, self.stage),
                               experience_id=experience_ids[0] if len(experience_ids) == 1 else None,
                               group_id=r.group.group_id if r.group is not None else None,
                               experience_ids=list(experience_ids), reason=reason, detail=detail, stage=self.stage,
                               source_topic=r.topic, partition=r.partition, offset=r.offset)
        self.producer.produce(self.topic, key=bound_key(r.key), value=self.serialize(rec, topic_context(self.topic)),
                              on_delivery=self.in_flight.expect(f"of {r.topic}[{r.partition}]@{r.offset} ({reason})"))
        self.producer.poll(0)
        self.count[reason] = self.count.get(reason, 0) + max(1, len(experience_ids))

    def flush(self, timeout: float = 30.0) -> None:
        """Rejections must be on the broker before their offsets are checkpointed: waits for them, not for the
        metrics and weight records the producer also holds (a frozen leader of those must not hold a step)."""
        self.in_flight.wait(self.producer, timeout)
