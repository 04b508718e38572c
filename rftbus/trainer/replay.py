"""Demonstration replay (MIX, `trainer.demo_replay`): demonstrations that trained are kept and drawn again
beside each batch.

On live traffic the graders' corrections arrive a few a second. Trained once each, the SFT side stays flat:
offline, 9,400 corrections arriving at the live rate, 16 fresh per batch and 8 optimizer steps each, left
2-digit addition at 0.19; the same corrections kept in a pool, 16 fresh plus 64 drawn again per step,
reached 0.80 by the 2,700th (docs/BENCHMARKS.md). A demonstration has no behaviour policy, so replaying it
is never stale. It is not counted as trained again: lineage and the books see each record once.

The pool is the newest demonstrations this rank trained, a window of the expert topic behind its positions.
A restart rebuilds it from the log (`refill`), so the checkpoint needs nothing beyond the offsets it holds.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable

from rftbus.ground.config import Config
from rftbus.trainer.batch_source import polled
from rftbus.ground.kafka.read import read_to_end
from rftbus.trainer.batch import Row, rows_of
from rftbus.trainer.checks import Limits, check_record


class DemoReplay:
    def __init__(self, size: int, per_step: int, seed: int = 0):
        self.rows: deque[Row] = deque(maxlen=size)
        self.per_step = per_step
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.rows)

    def draw(self) -> list[Row]:
        """Up to `per_step` demonstrations from the pool, without repeats. Called before the step's own
        rows join the pool, so a batch never holds a demonstration twice."""
        return self.rng.sample(list(self.rows), min(self.per_step, len(self.rows)))

    def add(self, rows: Iterable[Row]) -> None:
        """The rows of a step that trained: the demonstrations among them join the pool (the oldest leave)."""
        self.rows.extend(r for r in rows if r.expert)

    def refill(self, cfg: Config, positions: dict[tuple[str, int], int], topic: str, deserializer,
               limits: Limits | None) -> int:
        """After a restart: the demonstrations just behind `positions` on the expert `topic` (those the
        checkpoint says trained); returns how many joined the pool."""
        behind = {p: pos for (t, p), pos in positions.items() if t == topic and pos > 0}
        if not behind:
            return 0
        before = len(self.rows)
        need = self.rows.maxlen or 0  # a record holds at least one demonstration: `need` records back cover the pool
        for msg in read_to_end(cfg, topic, partitions=sorted(behind), until=behind,
                               start={p: pos - need for p, pos in behind.items()}):
            r = polled(msg, "expert", deserializer)
            verdict = check_record(r, limits)  # one that did not decode trains nothing (rejected when first read)
            if verdict.train and r.group is not None:
                self.rows.extend(rows_of(r.group, True, verdict.train))
        return len(self.rows) - before
