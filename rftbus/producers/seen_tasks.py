"""Explorer-side dedupe: a task id already handled is not rolled out again.

Tasks are keyed by their stable task_id, so every copy of a task lands in the same partition. When
an explorer is assigned a partition it rebuilds that partition's seen-set from the tasks topic
itself: every record before the group's committed offset was handled (produced or rejected). New
ids are added as they are handled. So re-publishing a taskset, restarting explorers or moving
partitions between them never rolls a task out twice, and no extra topic or state file is needed.
"""

from __future__ import annotations

from rftbus.ground.config import Config
from rftbus.ground.kafka.read import read_to_end


class SeenTasks:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._seen: dict[int, set[str]] = {}

    def rebuild(self, topic: str, partition: int, committed: int) -> int:
        """Read keys of [start, committed) of the partition; returns how many ids were loaded."""
        seen = self._seen[partition] = set()
        if committed <= 0:
            return 0
        for m in read_to_end(self.cfg, topic, partitions=[partition], until={partition: committed}, timeout_s=60):
            key = m.key()
            if key is not None:  # a key that is not UTF-8 is no task id (poison): it cannot crash us
                seen.add(key.decode(errors="replace"))
        return len(seen)

    def __contains__(self, item: tuple[int, str]) -> bool:
        partition, task_id = item
        return task_id in self._seen.get(partition, ())

    def add(self, partition: int, task_id: str) -> None:
        self._seen.setdefault(partition, set()).add(task_id)

    def drop(self, partitions: list[int]) -> None:
        for p in partitions:
            self._seen.pop(p, None)
