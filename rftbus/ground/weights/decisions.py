"""Following the promotion gate's decisions (topics.decisions): the one reader of what serves, for those that act
on it as it is decided (serve routes by it; the trainer keeps the files of what serves out of garbage collection).

A thread reads the topic from its beginning (no consumer group, nothing committed: every decision matters, in
order) and hands each decision about `model.name` that the decision rules believe (rftbus/ground/weights/decision_rules.py)
to `on_decision`, on that thread; once it has read to where the topic ended when it started, `on_caught_up` is
called once (serve loads what the decisions so far leave serving then, not every version they ever named). A record
that does not decode, or that the rules refuse, is reported, counted and skipped.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer
from rftbus.ground.kafka.read import consume_ready
from rftbus.ground.schemas import DecodeError, GateDecision, make_codec
from rftbus.ground.weights.decision_rules import DecisionBook


class DecisionFollower:
    def __init__(self, cfg: Config, on_decision: Callable[[GateDecision], None], report: Callable[[str], None],
                 on_caught_up: Callable[[], None] = lambda: None):
        self.cfg, self.on_decision, self.report, self.on_caught_up = cfg, on_decision, report, on_caught_up
        self.topic, self.model = cfg.topics.decisions.name, cfg.model.name
        self.decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(GateDecision)
        self.book = DecisionBook.of(cfg)
        self.read = self.repeats = 0  # believed; skipped as a repeat of one believed
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decision-follower", daemon=True)

    def start(self) -> DecisionFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def stopping(self) -> threading.Event:
        return self._stop

    def _run(self) -> None:
        consumer = make_consumer(self.cfg, f"rftbus-decisions-{uuid.uuid4().hex[:8]}", **{"enable.partition.eof": True})
        try:
            md = None
            while not self._stop.is_set():
                try:
                    md = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
                except KafkaException as e:
                    self.report(f"decisions topic {self.topic} unreadable ({e}); retrying")
                if md is not None and md.error is None and md.partitions:
                    break
                self._stop.wait(1.0)
            if md is None or self._stop.is_set():
                return
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in md.partitions])
            behind = set(md.partitions)  # partitions not read to their end yet (EOF: enable.partition.eof)
            while not self._stop.is_set():
                for msg in consume_ready(consumer, 100, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            behind.discard(msg.partition())
                        else:
                            self.report(f"reading {self.topic}: {err.str()}")
                        continue
                    self._one(msg)
                if not behind and not self.caught_up.is_set():
                    self.caught_up.set()
                    self.on_caught_up()
        finally:
            consumer.close()

    def _one(self, msg) -> None:
        try:
            d = self.decode(msg.value(), None)
        except DecodeError as e:
            self.book.refused += 1
            self.report(f"{self.topic}@{msg.offset()} does not decode ({e}); skipped")
            return
        if d is None or d.model != self.model:
            return
        believed, why = self.book.accept(d)
        if why:
            self.report(f"{self.topic}@{msg.offset()}: {why}; not applied")
        elif not believed:
            self.repeats += 1
        if believed:
            self.read += 1
            self.on_decision(d)


class ServedVersions:
    """The versions of `lineage` the gate has serving or on canary now (the trainer's garbage collection keeps their
    files)."""

    def __init__(self, cfg: Config, lineage: str = "", report: Callable[[str], None] = lambda m: None):
        self.lineage = lineage
        self._now: set[int] = set()
        self._lock = threading.Lock()
        self.follower = DecisionFollower(cfg, self._on, report)

    def start(self) -> ServedVersions:
        self.follower.start()
        return self

    def _on(self, d: GateDecision) -> None:
        with self._lock:
            self._now = ({d.serving} if d.serving_lineage == self.lineage else set()) \
                | ({d.candidate} if d.candidate is not None and d.lineage == self.lineage else set())

    def versions(self) -> set[int]:
        with self._lock:
            return set(self._now)


def decisions_so_far(cfg: Config, timeout_s: float = 120.0, strict: bool = True,
                     on_undecodable: Callable[[], None] = lambda: None,
                     on_refused: Callable[[str], None] = lambda why: None) -> list[GateDecision]:
    """Every decision about `model.name` on topics.decisions now that the decision rules believe, in order (the
    topic read to its end once): the gate's state after a restart, a run's summary. `on_refused` hears why each
    other one was not believed."""
    from rftbus.ground.kafka.read import read_to_end

    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(GateDecision)
    book = DecisionBook.of(cfg)
    out: list[GateDecision] = []
    for m in read_to_end(cfg, cfg.topics.decisions.name, timeout_s=timeout_s, strict=strict):
        try:
            d = decode(m.value() or b"", None)
        except DecodeError:
            on_undecodable()
            continue
        if d is None or d.model != cfg.model.name:
            continue
        believed, why = book.accept(d)
        if why:
            on_refused(why)
        if believed:
            out.append(d)
    return out
