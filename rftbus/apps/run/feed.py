"""Keeping the tasks (and demonstrations) topics fed for the run: the configured taskset in passes, or a
curriculum's stages first. Published from the run's start-up thread, then ticked, each kind from a thread of its own."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice

from confluent_kafka import KafkaException

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.inspect import backlog as kafka_backlog
from rftbus.ground.kafka.inspect import group_lag
from rftbus.apps.run.curriculum import Curriculum
from rftbus.apps.run.passes import TaskPasses
from rftbus.ground.status import trainer_step


RUN_AHEAD_S = 10.0  # demonstrations kept waiting for the trainer's next seconds: a node's failover on the embedded
# cluster (a frozen one's request timeout, or the fencing of a killed one, then the ISR shrink: 4-6 s) must not empty
# its lane. With one pass as the only mark, the toy trainer took each pass as it landed (a pass of the ci plan lasts
# it ~2.5 s), so every failover emptied its lane and a freeze cost 2-3x what a kill did (#46).


class TakeRate:
    """How fast a reader takes records, from its summed positions seen over the last WINDOW_S."""

    WINDOW_S = 15.0

    def __init__(self, ahead_s: float = RUN_AHEAD_S, clock: Callable[[], float] = time.monotonic):
        self.ahead_s, self.clock = ahead_s, clock
        self.seen: deque[tuple[float, int]] = deque()

    def ahead(self, taken: int) -> int:
        """Records the reader takes in ahead_s at its recent rate (0 until 2 s of it are seen; a restart that
        moved its positions back starts the window again)."""
        now = self.clock()
        if self.seen and taken < self.seen[-1][1]:
            self.seen.clear()
        self.seen.append((now, taken))
        while now - self.seen[0][0] > self.WINDOW_S:
            self.seen.popleft()
        t0, n0 = self.seen[0]
        return 0 if now - t0 < 2.0 else int((taken - n0) / (now - t0) * self.ahead_s)


class TaskFeed:
    def __init__(self, cfg: Config, committed: CommittedOffsets, log: Callable[[list[str]], None],
                 note: Callable[[str], None], started: float):
        self.cfg, self.committed, self.log, self.note, self.started = cfg, committed, log, note, started
        self.curriculum: Curriculum | None = None  # with `run.curriculum`
        self.passes: TaskPasses | None = None  # the configured taskset's passes, once it is being published
        self.expert_rate = TakeRate()  # the trainer's, of demonstrations

    def publish(self, admin) -> None:
        """The configured taskset now, or with `run.curriculum` its first stage now and the rest
        from `tick`, the configured taskset after the last stage."""
        if self.cfg.run.explorers == 0 and not self.cfg.run.expert:
            return  # live traffic only: nobody reads tasks or demonstrations of the taskset
        if not self.cfg.run.curriculum:
            self._publish_configured()
            return
        from rftbus.producers.tasks.publish import publish_tasks

        def publish(rows) -> int:
            rep = publish_tasks(self.cfg, rows)
            if rep.failed:
                self.log([f"curriculum: {len(rep.failed)} tasks not acknowledged, e.g. {rep.failed[0]}"])
            return rep.published

        def then() -> None:
            threading.Thread(target=self._publish_configured_logged, name="taskset", daemon=True).start()

        self.curriculum = curriculum = Curriculum(self.cfg, publish, then, started=self.started)
        self.log(curriculum.tick(0, self._tasks_backlog(admin, wait_s=30)))

    def tick(self, admin, statuses: list[dict], kind: str) -> None:
        """About once a second per kind ("tasks": the curriculum's next stage and the taskset's next pass of tasks;
        "expert": its next pass of demonstrations), each kind from a thread of its own (run/ticker.py): the
        explorers' backlog is read from their group's committed offsets, and that read waited 10 s and more on a
        frozen node while the trainer, fed from the other thread, ran dry of demonstrations (#46)."""
        if kind == "tasks" and self.curriculum and not self.curriculum.done:
            self._feed_curriculum(admin, statuses)
        self._feed_pass(admin, statuses, kind)

    def _tasks_backlog(self, admin, wait_s: float = 0.0) -> int:
        """Tasks published and not yet rolled out (the explorers commit a task once its group is acked).
        `wait_s`: keep asking that long while the coordinator of a new group answers NOT_COORDINATOR."""
        c, deadline = self.cfg, time.monotonic() + wait_s
        while True:
            try:
                return group_lag(admin, self.committed, c.explorer.group_id, [c.topics.tasks.name]).lag
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _feed_curriculum(self, admin, statuses: list[dict]) -> None:
        step = trainer_step(statuses)
        try:
            backlog = self._tasks_backlog(admin)
        except (KafkaException, TimeoutError) as e:  # a broker restart: the next look retries
            self.note(f"curriculum: tasks backlog unreadable ({type(e).__name__}: {e}); retrying")
            return
        if self.curriculum is not None:
            self.log(self.curriculum.tick(step, backlog))

    def _publish_configured_logged(self) -> None:
        try:
            self._publish_configured()
        except (RftbusError, KafkaException) as e:
            self.log([f"tasks: publishing {self.cfg.taskset.name} failed: {e}"])

    def _publish_configured(self) -> None:
        """Read the configured taskset now (a taskset that cannot give the tasks fails at start-up), publish
        it in a thread: the explorers start, load their model and take the first tasks while the rest,
        and the later passes (run/passes.py), are still being published (#19: start learning at once)."""
        from rftbus.ground.tasksets.data import open_taskset

        c = self.cfg
        ts = open_taskset(c.taskset)

        def rows():
            return train_rows(c, ts)

        self.passes = TaskPasses(c, rows, self.log, self.started)
        self.passes.start(list(rows()))

    def _feed_pass(self, admin, statuses: list[dict], kind: str) -> None:
        """The next pass of `kind` (run/passes.py) once fewer than one pass of it is waiting, or, for
        demonstrations, fewer than the trainer takes in RUN_AHEAD_S. The demonstrations waiting are counted from
        the trainer's own positions (its status) when it has them: its committed offsets stand still while its
        group's coordinator is frozen (its commits fail), and reading them waited 10-30 s, so a run starved its
        trainer of demonstrations through every coordinator freeze (#46)."""
        if self.passes is None or kind not in self.passes.wants():
            return
        c = self.cfg
        group, topic = {"tasks": (c.explorer.group_id, c.topics.tasks.name),
                        "expert": (c.trainer.group_id, c.topics.expert.name)}[kind]
        own = trainer_positions(statuses, topic) if kind == "expert" else None
        try:
            backlog = (kafka_backlog(admin, topic, own) if own
                       else group_lag(admin, self.committed, group, [topic]).lag)
        except (KafkaException, TimeoutError):  # a broker restart: the next look retries
            return
        ahead = {"expert": self.expert_rate.ahead(sum(own.values()))} if own else None
        self.passes.tick({kind: backlog}, ahead)


def trainer_positions(statuses: list[dict], topic: str) -> dict[int, int] | None:
    """The trainer's next offset per partition of `topic`, from its status (the checkpoint's shape,
    `positions_to_json`; None: not reported yet)."""
    for s in statuses:
        pos = {int(d["partition"]): int(d["offset"]) for d in s.get("positions") or () if d["topic"] == topic} \
            if s.get("role") == "trainer" else None
        if pos:
            return pos
    return None


def train_rows(cfg, ts):
    """The train rows a run publishes, in order: a data taskset's first run.tasks train rows (its held-out eval share
    is never published), else run.tasks drawn from the built-in taskset."""
    from rftbus.producers.tasks.sources import read_source
    from rftbus.ground.tasksets.data import DataTaskset

    if isinstance(ts, DataTaskset):
        return islice(ts.rows("train"), cfg.run.tasks)
    return read_source(cfg.taskset.name, fields=cfg.taskset.fields, split="train", n=cfg.run.tasks,
                       seed=cfg.taskset.seed, params=cfg.taskset.params)
