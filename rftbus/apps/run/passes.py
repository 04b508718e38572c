"""Passes over the configured taskset for `rftbus run`: the first now, each later pass of tasks (for the
explorers) or of demonstrations (for the trainer's expert lane, read ~10x faster in MIX) once fewer than
one pass of it is waiting. Publishing every pass up front cost the first minute of a run CPU it needed
for learning (#19). A later pass is a new task (id suffixed with the pass), so the explorers' dedupe,
which keeps one rollout per task id, lets it through; the same for the demonstrations made from it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from confluent_kafka import KafkaException, Producer

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.producers.tasks.sources import Row

KINDS = ("tasks", "expert")


IN_FLIGHT = 12  # passes whose records may still await Kafka's acknowledgement at once: a small taskset's pass
# lasts the toy trainer ~2.5 s, and a third of each waits out a 30 s leader freeze (3 ran dry in 7.5 s)


class TaskPasses:
    """`start` publishes the first pass in a thread; `tick` is called with fresh backlogs (records waiting
    per kind) and starts the next pass of a kind that runs low, one pass being produced at a time. A later
    pass does not wait for the acknowledgements of the one before (up to IN_FLIGHT of them): a frozen leader
    holds a third of a pass's records for its request timeout and more, and a trainer that takes a pass of
    demonstrations in seconds ran dry meanwhile (#46)."""

    def __init__(self, cfg: Config, rows: Callable[[], Iterable[Row]], log: Callable[[list[str]], None],
                 started: float):
        self.cfg, self.rows, self.log, self.started = cfg, rows, log, started
        self.last = {"tasks": cfg.run.task_passes, "expert": cfg.run.expert_epochs if cfg.run.expert else 0}
        self.size = {"tasks": 1, "expert": 1}
        self.next = {"tasks": 2, "expert": 2}
        self.ready = False  # the first pass is published (its sizes are known)
        self._producing = False
        self._lock = threading.Lock()  # the two kinds' feeds tick from two threads
        self._threads: list[threading.Thread] = []
        self._demo_of: Callable | None = None  # publish.expert_maker, made by the first later pass of demonstrations
        self._producer: Producer | None = None  # one for every pass (publish_tasks: a new one waited on frozen nodes)

    def start(self, first: list[Row]) -> None:
        self._run(self._publish_first, first)

    def wants(self) -> list[str]:
        """The kinds that may need a pass now (the caller reads their backlogs)."""
        with self._lock:
            return self._wants()

    def _wants(self) -> list[str]:
        self._threads = [t for t in self._threads if t.is_alive()]
        busy = self._producing or len(self._threads) >= IN_FLIGHT
        return [] if busy or not self.ready else [k for k in KINDS if self.next[k] <= self.last[k]]

    def tick(self, backlog: dict[str, int], ahead: dict[str, int] | None = None) -> bool:
        """True if a pass was started: a kind runs low below one pass, or below `ahead` records (what its reader
        takes in a while, run/feed.py). Called for each kind from a thread of its own."""
        with self._lock:
            for kind in self._wants():
                if kind in backlog and backlog[kind] < max(self.size[kind], (ahead or {}).get(kind, 0)):
                    n, self.next[kind] = self.next[kind], self.next[kind] + 1
                    self._run(self._publish_pass, kind, n)
                    return True
        return False

    def producer(self) -> Producer:
        """The passes' one producer, made for the first pass and kept."""
        with self._lock:
            if self._producer is None:
                from rftbus.ground.kafka.clients import make_producer

                self._producer = make_producer(self.cfg)
            return self._producer

    def _run(self, fn, *args) -> None:
        def guarded() -> None:
            try:
                fn(*args)
            except (RftbusError, KafkaException) as e:
                self.log([f"tasks: publishing {self.cfg.taskset.name} failed: {e}"])
            finally:
                self._produced()
        self._producing = True
        thread = threading.Thread(target=guarded, name="tasks", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _produced(self) -> None:
        self._producing = False

    def _publish_first(self, first: list[Row]) -> None:
        from rftbus.producers.tasks.publish import publish_tasks

        c = self.cfg
        report = publish_tasks(c, first, expert=c.run.expert, producer=self.producer())
        self.log([f"tasks: published {report.published} {c.taskset.name} tasks"
                  + (f" and {report.expert} expert demonstrations" if c.run.expert else "")
                  + f" ({time.time() - self.started:.1f} s after start)"])
        self.size = {"tasks": max(1, report.published), "expert": max(1, report.expert)}
        self.ready = True

    def _publish_pass(self, kind: str, n: int) -> None:
        from rftbus.producers.tasks.publish import publish_tasks

        again = (Row(r.where, replace(r.task, task_id=f"{r.task.task_id}.p{n}"), r.error) if r.task is not None else r
                 for r in self.rows())
        if kind == "expert" and self._demo_of is None:  # made once: it loads the tokenizer (~1.5-3 CPU-s); a
            from rftbus.producers.tasks.publish import expert_maker  # pass of a small taskset lasts the trainer seconds

            self._demo_of = expert_maker(self.cfg)
        rep = publish_tasks(self.cfg, again, expert=kind == "expert", tasks=kind == "tasks", on_produced=self._produced,
                            demo_of=self._demo_of, producer=self.producer())
        what = f"{rep.published} tasks" if kind == "tasks" else f"{rep.expert} demonstrations"
        self.log([f"tasks: {kind} pass {n}: {what} ({time.time() - self.started:.0f} s)"])
