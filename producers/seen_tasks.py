"""Explorer-side dedupe: a task id already handled is not rolled out again.

Tasks are keyed by their stable task_id, so every copy of a task lands in the same partition. When
an explorer is assigned a partition it rebuilds that partition's seen-set from the tasks topic
itself: every record before the group's committed offset was handled (produced or rejected). New
ids are added as they are handled. So re-publishing a taskset, restarting explorers or moving
partitions between them never rolls a task out twice, and no extra topic or state file is needed.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaError, TopicPartition

from rftbus.config import Config
from rftbus.kafka.clients import make_consumer


class SeenTasks:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._seen: dict[int, set[str]] = {}

    def rebuild(self, topic: str, partition: int, committed: int) -> int:
        """Read keys of [start, committed) of the partition; returns how many ids were loaded."""
        seen = self._seen[partition] = set()
        if committed <= 0:
            return 0
        reader = make_consumer(self.cfg, f"rftbus-seen-{uuid.uuid4().hex[:8]}", **{"enable.partition.eof": True})
        try:
            low, _high = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if low >= committed:
                return 0
            reader.assign([TopicPartition(topic, partition, low)])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                msgs = reader.consume(num_messages=1000, timeout=1.0)
                for m in msgs:
                    if m.error():
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            return len(seen)
                        continue
                    if m.offset() >= committed:
                        return len(seen)
                    if m.key() is not None:  # a key that is not UTF-8 is no task id (poison): it cannot crash us
                        seen.add(m.key().decode(errors="replace"))
            raise RuntimeError(f"could not read {topic}[{partition}] up to offset {committed} within 60 s")
        finally:
            reader.close()

    def __contains__(self, item: tuple[int, str]) -> bool:
        partition, task_id = item
        return task_id in self._seen.get(partition, ())

    def add(self, partition: int, task_id: str) -> None:
        self._seen.setdefault(partition, set()).add(task_id)

    def drop(self, partitions: list[int]) -> None:
        for p in partitions:
            self._seen.pop(p, None)
