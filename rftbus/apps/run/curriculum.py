"""A task curriculum for `rftbus run`: easier tasks of the taskset first, the configured ones once
the trainer has taken a stage's steps on them.

Why just in time: the explorers read the tasks topic in order, so a stage published ahead of need
would still be rolled out long after the trainer moved on. A stage is published one pass at a time,
only while the explorers' backlog on the tasks topic is under one pass, so the switch to the next
stage lands within about two passes of its step. Each pass gets new task ids (the explorers roll
out a task id once).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace

from rftbus.ground.config import Config
from rftbus.producers.tasks.sources import Row, SourceError, read_source
from rftbus.ground.schemas import Task


@dataclass
class StageRecord:
    """What a stage did, for the live view and the summary."""
    stage: int
    params: dict
    until_step: int
    started_step: int
    started_s: float
    passes: int = 0
    published: int = 0
    ended_step: int | None = None
    ended_s: float | None = None


@dataclass
class Curriculum:
    """Feeds `run.curriculum` through `publish` and calls `then` (the configured taskset) after the
    last stage. `tick` is called with fresh readings; it does no I/O of its own besides those two."""
    cfg: Config
    publish: Callable[[Iterable[Row]], int]  # rows -> tasks Kafka acknowledged
    then: Callable[[], None]
    started: float = field(default_factory=time.time)
    records: list[StageRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        c = self.cfg
        self.stages = c.run.curriculum
        self.tasks: list[list[Task]] = []
        self.bad: list[list[tuple[str, str | None]]] = []  # per stage: rows of a file source that are not tasks
        for i, st in enumerate(self.stages, 1):  # every stage read now: a bad one fails at start-up
            try:
                rows = list(read_source(st.source or c.taskset.name, fields=c.taskset.fields, split="train", n=st.tasks,
                                        seed=c.taskset.seed, params=st.params))
            except (SourceError, TypeError) as e:
                raise SourceError(f"run.curriculum stage {i} ({st.source or c.taskset.name} {st.params}): {e}") from None
            self.tasks.append([r.task for r in rows if r.task is not None])
            self.bad.append([(r.where, r.error) for r in rows if r.task is None])
        self.done = not self.stages

    @property
    def stage(self) -> int | None:
        """The running stage (0-based), None once the configured taskset took over."""
        return None if self.done else len(self.records) - 1 if self.records else 0

    def tick(self, step: int, backlog: int) -> list[str]:
        """Advance past the stages `step` has finished, then top the explorers' `backlog` (tasks
        published and not yet rolled out) up to two passes of the running stage."""
        events: list[str] = []
        if self.done:
            return events
        if not self.records:
            self._begin(0, step, events)
        while self.stage is not None and step >= self.stages[self.stage].until_step:
            rec = self.records[-1]
            rec.ended_step, rec.ended_s = step, round(time.time() - self.started, 1)
            events.append(f"curriculum: stage {rec.stage + 1} done at step {step} "
                          f"({rec.passes} passes, {rec.published} tasks)")
            if rec.stage + 1 < len(self.stages):
                self._begin(rec.stage + 1, step, events)
            else:
                self.done = True
                events.append("curriculum: done; publishing the configured taskset")
                self.then()
        if self.stage is not None:
            pass_size = len(self.tasks[self.stage])
            need = max(0, 2 * pass_size - backlog) // pass_size if backlog < pass_size else 0
            for _ in range(need):
                self._publish_pass()
        return events

    def _begin(self, i: int, step: int, events: list[str]) -> None:
        st = self.stages[i]
        self.records.append(StageRecord(i, dict(st.params), st.until_step, step, round(time.time() - self.started, 1)))
        events.append(f"curriculum: stage {i + 1}/{len(self.stages)}: {st.source or self.cfg.taskset.name} "
                      f"{st.params}, {len(self.tasks[i])} tasks, until step {st.until_step}")
        if self.bad[i]:
            where, why = self.bad[i][0]
            events.append(f"curriculum: stage {i + 1}: {len(self.bad[i])} rows skipped, not tasks "
                          f"(first: {where}: {why})")

    def _publish_pass(self) -> None:
        rec = self.records[-1]
        rec.passes += 1
        tag = f".c{rec.stage + 1}p{rec.passes}"
        order = list(self.tasks[rec.stage])
        random.Random(tag).shuffle(order)  # each pass in its own order, as sampling would give
        rows = (Row(f"stage {rec.stage + 1} task {k}", replace(t, task_id=t.task_id + tag))
                for k, t in enumerate(order, 1))
        rec.published += self.publish(rows)

    def summary(self) -> list[dict]:
        return [{**asdict(r), "stage": r.stage + 1} for r in self.records]  # 1-based, as in the events
