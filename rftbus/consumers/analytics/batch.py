"""The sink's buffer (pure): rows per table plus the next offset to commit per partition.

A batch is flushed whole: every table's rows are written, then the partitions' offsets committed.
So an offset is committed only when every row of every message before it is in ClickHouse.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any


class Batch:
    def __init__(self, max_rows: int, max_seconds: float, clock=time.monotonic):
        self.max_rows, self.max_seconds, self.clock = max_rows, max_seconds, clock
        self.tables: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.offsets: dict[tuple[str, int], int] = {}  # (kafka topic, partition) -> next offset to read
        self.messages = 0
        self.rows = 0
        self.started: float | None = None

    def add(self, kafka_topic: str, partition: int, offset: int, rows: list[tuple[str, dict[str, Any]]]) -> None:
        if self.started is None:
            self.started = self.clock()
        for table, row in rows:
            self.tables[table].append(row)
        self.rows += len(rows)
        self.messages += 1
        tp = (kafka_topic, partition)
        self.offsets[tp] = max(self.offsets.get(tp, 0), offset + 1)

    def due(self) -> bool:
        return self.messages > 0 and (self.rows >= self.max_rows or self.clock() - self.started >= self.max_seconds)

    def wait_s(self, idle: float = 0.2) -> float:
        """How long the next poll may block without making this batch late."""
        if self.started is None:
            return idle
        return max(0.0, min(idle, self.max_seconds - (self.clock() - self.started)))

    def counts(self) -> dict[str, int]:
        return {t: len(rows) for t, rows in self.tables.items()}

    def __len__(self) -> int:
        return self.messages
