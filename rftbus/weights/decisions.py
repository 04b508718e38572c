"""Following the promotion gate's decisions (topics.decisions): the one reader of what serves, for those that act
on it as it is decided (serve routes by it; the trainer keeps the files of what serves out of garbage collection).

A thread reads the topic from its beginning (no consumer group, nothing committed: every decision matters, in
order) and hands each decision about `model.name` to `on_decision`, on that thread. A record that does not decode is
reported and skipped.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from rftbus.config import Config
from rftbus.kafka.clients import make_consumer
from rftbus.kafka.read import consume_ready
from rftbus.schemas import DecodeError, GateDecision, make_codec


class DecisionFollower:
    def __init__(self, cfg: Config, on_decision: Callable[[GateDecision], None], report: Callable[[str], None]):
        self.cfg, self.on_decision, self.report = cfg, on_decision, report
        self.topic, self.model = cfg.topics.decisions.name, cfg.model.name
        self.decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(GateDecision)
        self.read = 0
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
            while not self._stop.is_set():
                for msg in consume_ready(consumer, 100, 0.2):
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.report(f"reading {self.topic}: {err.str()}")
                        continue
                    try:
                        d = self.decode(msg.value(), None)
                    except DecodeError as e:
                        self.report(f"{self.topic}@{msg.offset()} does not decode ({e}); skipped")
                        continue
                    if d is not None and d.model == self.model:
                        self.read += 1
                        self.on_decision(d)
        finally:
            consumer.close()


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
                     on_undecodable: Callable[[], None] = lambda: None) -> list[GateDecision]:
    """Every decision about `model.name` on topics.decisions now, in order (the topic read to its end once): the
    gate's state after a restart, a run's summary."""
    from rftbus.kafka.read import read_to_end

    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(GateDecision)
    out: list[GateDecision] = []
    for m in read_to_end(cfg, cfg.topics.decisions.name, timeout_s=timeout_s, strict=strict):
        try:
            d = decode(m.value() or b"", None)
        except DecodeError:
            on_undecodable()
            continue
        if d is not None and d.model == cfg.model.name:
            out.append(d)
    return out
