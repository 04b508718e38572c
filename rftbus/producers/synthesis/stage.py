"""`rftbus synthesize`: the synthesize stage. It reads the explorers' finished groups off the raw experience topic
(its own consumer group), picks parents by their outcome (`synthesis.parents`), asks the synthesizer for new tasks
of the difficulty the outcome calls for, and publishes to the tasks topic those that are well formed, verified
(verify.py), new (novelty.py) and within the quotas (quota.py), each with its lineage (Task v3: parent, synthesizer,
generation, the parent's outcome). Publishing goes through the one task publisher (with demonstrations where the
run trains on them), and a batch's raw offsets are committed only once Kafka acknowledged its tasks: a crash redoes
the batch, and what it had published comes back as `duplicate`.

A synthesizer that raises, returns something else than candidates or takes longer than `synthesis.timeout_s` is
reported and counted; that parent is skipped and the stage goes on. Refused candidates are counted by reason.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import Counter
from dataclasses import replace
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as CallTimeout

from confluent_kafka import KafkaError

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer, make_producer
from rftbus.ground.kafka.read import consume_ready, read_to_end
from rftbus.ground.schemas import DecodeError, ExperienceGroup, Task, make_codec
from rftbus.ground.status import StatusFile
from rftbus.ground.tasksets.files import Row
from rftbus.producers.synthesis.base import BadCandidate, Outcome, Solver, as_candidate, make_synthesizer, outcome_of
from rftbus.producers.synthesis.novelty import Novelty, fingerprint
from rftbus.producers.synthesis.quota import Quota
from rftbus.producers.synthesis.verify import AnswerCheck

log = logging.getLogger("rftbus.producers.synthesis")
_PASS = re.compile(r"\.p\d+$")  # a later pass of a task (rftbus/apps/run/passes.py): the same problem


def base_id(task_id: str) -> str:
    return _PASS.sub("", task_id)


def held_out_rule(cfg: Config) -> Callable[[str], bool]:
    """Whether a prompt is one of the taskset's held-out eval problems."""
    from rftbus.ground.tasksets.base import is_eval, taskset_names
    from rftbus.ground.tasksets.data import open_taskset

    tc = cfg.taskset
    if tc.path is None and tc.name in taskset_names():
        return lambda prompt: is_eval(tc.name, prompt)
    ts = open_taskset(tc)
    n = ts.check()["eval"] if hasattr(ts, "check") else 0
    held = {fingerprint(t.prompt) for t in ts.tasks("eval", n, tc.seed)} if n else set()
    return lambda prompt: fingerprint(prompt) in held


class Synthesize:
    def __init__(self, cfg: Config, report: Callable[[str], None] = print):
        from rftbus.ground.tasksets.base import get_taskset, taskset_names

        self.cfg, self.sc, self.report = cfg, cfg.synthesis, report
        codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
        self.decode_group, self.decode_task = codec.deserializer(ExperienceGroup), codec.deserializer(Task)
        self.synthesizer = make_synthesizer(self.sc.synthesizer, cfg.taskset.name, cfg.taskset.params)
        tc = cfg.taskset
        builtin = get_taskset(tc.name, **tc.params) if tc.path is None and tc.name in taskset_names() else None
        self.check = AnswerCheck(self.sc, builtin, self.synthesizer if isinstance(self.synthesizer, Solver) else None)
        self.novelty = Novelty(held_out_rule(cfg))
        self.quota = Quota(self.sc)
        self.parents: dict[str, Task] = {}  # base task id -> the task (every task on the topic)
        self.counts: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.task_next: dict[int, int] = {}  # the tasks topic: next offset to read per partition
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="synthesizer")
        self.status = StatusFile(cfg.state_dir, "synthesize", self.sc.id, self.sc.status_interval_s)
        self._stop = threading.Event()
        self._tasks_reader = make_consumer(cfg, "rftbus-synthesize-tasks", **{"enable.partition.eof": True})

    def stop(self) -> None:
        self._stop.set()

    # -- the tasks topic: parents, what exists, what this stage has made -------------------------------------
    def read_tasks(self) -> None:
        """Every task record since the last call: parents by id, fingerprints, the quotas' counts."""
        for msg in read_to_end(self.cfg, self.cfg.topics.tasks.name, start=dict(self.task_next), strict=False,
                               timeout_s=10.0, consumer=self._tasks_reader):
            self.task_next[msg.partition() or 0] = (msg.offset() or 0) + 1
            try:
                task = self.decode_task(msg.value(), None)
            except DecodeError:
                self.counts["undecodable_tasks"] += 1
                continue
            if isinstance(task, Task):
                self.parents.setdefault(base_id(task.task_id), task)
                self.novelty.add(task.prompt)
                self.quota.seen(task)

    # -- one finished group ---------------------------------------------------------------------------------
    def _refuse(self, reason: str, detail: str = "") -> None:
        self.refused[reason] += 1
        if detail:
            log.info("synthesis: refused %s: %s", reason, detail)

    def _ask(self, parent: Task, outcome: Outcome) -> list | None:
        """The synthesizer's candidates, or None when it raised, returned a non-list or ran out of time."""
        fut = self.pool.submit(self.synthesizer, parent, outcome)
        try:
            made = fut.result(timeout=self.sc.timeout_s)
        except CallTimeout:
            self.counts["synthesizer_timeouts"] += 1
            self.report(f"synthesize: the synthesizer took more than {self.sc.timeout_s:g} s on {parent.task_id}; "
                        "skipped")
            self.pool.shutdown(wait=False)  # (its thread finishes on its own; the next call gets a fresh one)
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="synthesizer")
            return None
        except Exception as e:  # noqa: BLE001 - the user's synthesizer may raise anything: reported, stage goes on
            self.counts["synthesizer_errors"] += 1
            self.report(f"synthesize: the synthesizer raised on {parent.task_id}: {type(e).__name__}: {e}")
            return None
        if not isinstance(made, (list, tuple)):
            self.counts["synthesizer_errors"] += 1
            self.report(f"synthesize: the synthesizer returned a {type(made).__name__}, not a list of candidates")
            return None
        return list(made)

    def from_group(self, g: ExperienceGroup, now: float) -> list[Task]:
        """The new tasks one finished group gives (refusals counted)."""
        outcome = outcome_of(g, self.sc, base_id(g.task_id))
        if outcome is None:
            return []
        self.counts["parents"] += 1
        parent = self.parents.get(outcome.task_id)
        if parent is None:
            self._refuse("unknown_parent", f"task {outcome.task_id} is not on {self.cfg.topics.tasks.name}")
            return []
        if (why := self.quota.refusal(parent, now)) is not None:
            self._refuse(why)
            return []
        outcome = replace(outcome, children=len(self.quota.children.get(outcome.task_id, ())))
        made = self._ask(parent, outcome)
        if made == []:
            self.counts["no_candidates"] += 1  # (an llm's reply with no problem in it, a taskset with no variants)
        out: list[Task] = []
        for item in made or ():
            self.counts["candidates"] += 1
            try:
                c = as_candidate(item)
            except BadCandidate as e:
                self._refuse("malformed", str(e))
                continue
            why = self.quota.refusal(parent, now) or self.novelty.refusal(c.prompt)
            if why is not None:
                self._refuse(why, c.prompt[:120])
                continue
            checked = self.check(c)
            if checked.refusal is not None:
                self._refuse(checked.refusal, checked.detail)
                continue
            pid = base_id(parent.task_id)
            task = Task(task_id="syn-" + hashlib.sha1(f"{pid}\x00{c.prompt}".encode()).hexdigest()[:20],
                        taskset=parent.taskset, split="train", prompt=c.prompt, answer=c.answer, messages=c.messages,
                        metadata={**c.metadata, "verified": checked.detail}, parent_task_id=pid,
                        synthesizer=self.sc.synthesizer.name, generation=parent.generation + 1,
                        parent_outcome=outcome.kind)
            self.novelty.add(c.prompt)
            self.quota.taken(task, now)
            out.append(task)
        return out

    # -- the loop -------------------------------------------------------------------------------------------
    def run(self) -> None:
        from rftbus.producers.tasks.publish import publish_tasks

        self.status.update(state="starting", **self._figures())
        self.status.start()
        raw = make_consumer(self.cfg, self.sc.group_id)
        raw.subscribe([self.cfg.topics.raw.name])
        producer = make_producer(self.cfg)
        self.read_tasks()
        self.status.update(state="running")
        last_read = time.monotonic()
        try:
            while not self._stop.is_set():
                msgs = consume_ready(raw, 64, 0.5)
                if msgs or time.monotonic() - last_read > 2.0:
                    self.read_tasks()
                    last_read = time.monotonic()
                new: list[Task] = []
                for msg in msgs:
                    if (err := msg.error()) is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.report(f"synthesize: reading {self.cfg.topics.raw.name}: {err.str()}")
                        continue
                    new += self._handle(msg.value())
                if new:
                    rep = publish_tasks(self.cfg, (Row(f"synthesized {t.task_id}", task=t) for t in new),
                                        expert=self.cfg.run.expert, producer=producer)
                    if rep.failed:  # not committed: the batch is redone, what landed comes back `duplicate`
                        raise RuntimeError(f"synthesize: Kafka did not take {len(rep.failed)} new tasks: "
                                           f"{rep.failed[:3]}")
                    self.counts["published"] += rep.published
                if msgs:
                    raw.commit(asynchronous=False)
                self.status.update(**self._figures())
        finally:
            self.status.stop(state="stopped", **self._figures())
            raw.close()
            self._tasks_reader.close()
            self.pool.shutdown(wait=False)

    def _handle(self, value: bytes | None) -> list[Task]:
        """One raw record: an error in it is reported and counted, never the stage's end."""
        self.counts["groups"] += 1
        try:
            g = self.decode_group(value or b"", None)
        except DecodeError:
            self.counts["undecodable"] += 1  # (the streams reject it with its reason)
            return []
        try:
            return self.from_group(g, time.time()) if isinstance(g, ExperienceGroup) else []
        except Exception as e:  # noqa: BLE001 - one group's failure is reported; the stage goes on
            self.counts["processing_errors"] += 1
            self.report(f"synthesize: group {getattr(g, 'group_id', '?')}: {type(e).__name__}: {e}")
            return []

    def _figures(self) -> dict:
        return {"counts": dict(self.counts), "refused": dict(self.refused), "tasks_seen": self.quota.total,
                "synthesized_seen": len(self.quota.synthesized)}
