"""`rftbus gate`: the promotion gate as a process on the log.

At start it reads its own decisions back (topics.decisions, to the end): they are the truth, so a gate killed and
restarted never decides again what it decided. Then it reads raw (the served answers: live groups), feedback (their
grades), weights (published versions) and metrics (held-out eval points) from their beginnings, counting only until
it has caught up with where they ended when it started, and deciding from then on: after each batch it reads, and
once a second. Each decision is written with acks=all and flushed before the next is made. A record it cannot
decode is counted and skipped (the streams reject it with its reason; the gate only reads evidence).

What it believes is what the rest of the run believes, by the same rules, not copies: its own decisions read back
pass the decision rules (rftbus/ground/weights/decision_rules.py); a version becomes a candidate only if the weights
admission takes its record (rftbus/ground/weights/admit.py: the store's uri, its file there, not far ahead) and its
lineage is one the config trains; an answer is evidence only if the streams keep it (`live_answers`) and a grade
only if the streams would train on its reward (`reward_refusal`).
"""

from __future__ import annotations

import threading
from functools import partial
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, TopicPartition

from rftbus.ground.config import Config
from rftbus.consumers.gate.state import GateState
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import make_consumer, make_producer
from rftbus.ground.kafka.read import consume_ready
from rftbus.ground.kafka.retry import retry_kafka
from rftbus.ground.models.lineage import label, lineage_of
from rftbus.ground.schemas import DecodeError, Feedback, GateDecision, TrainerMetric, WeightVersion
from rftbus.ground.schemas import make_codec, topic_context
from rftbus.ground.status import write_status
from rftbus.ground.grades.rules import BadFeedback, grades
from rftbus.ground.schemas.verify import live_answers, reward_refusal
from rftbus.ground.schemas.view import GroupReader
from rftbus.ground.weights.admit import refusal
from rftbus.ground.weights.transport import make_transport
from rftbus.ground.weights.decisions import decisions_so_far


class Gate:
    def __init__(self, cfg: Config, report: Callable[[str], None] = print):
        self.cfg, self.report = cfg, report
        self.state = GateState(cfg.model.name, cfg.gate, cfg.gate.id)
        codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
        self.decode = codec.deserializer()
        self.read_group = GroupReader(codec)
        self.raw_partitions = cfg.topics.raw.partitions  # as the broker has it, once run() has looked
        self.encode = codec.serializer(GateDecision)
        self.topics = {cfg.topics.raw.name: "raw", cfg.topics.feedback.name: "feedback",
                       cfg.topics.weights.name: "weights", cfg.topics.metrics.name: "metrics"}
        self.counts = {"answers": 0, "grades": 0, "evidence": 0, "undecodable": 0, "decisions": 0,
                       "refused_answers": 0, "refused_grades": 0, "refused_weights": 0, "refused_decisions": 0}
        self.ends: dict[tuple[str, int], int] = {}
        self.lineages = cfg.lineages
        self.transport = make_transport(cfg)  # judges each weight record before it is a candidate
        self._stop = threading.Event()

    # -- the log -------------------------------------------------------------------------------------------
    def read_decisions(self) -> int:
        """Adopt every decision on topics.decisions about this model; how many."""

        def undecodable() -> None:
            self.counts["undecodable"] += 1

        def refused(why: str) -> None:
            self.counts["refused_decisions"] += 1
            self.report(f"gate: {why}; not adopted")

        mine = retry_kafka(lambda: decisions_so_far(self.cfg, on_undecodable=undecodable, on_refused=refused),
                           f"reading the gate's decisions back from {self.cfg.topics.decisions.name}")
        for d in mine:
            self.state.adopt(d)
        return len(mine)

    def _decoded(self, data: bytes | None):
        try:
            return self.decode(data or b"", None)
        except DecodeError:
            self.counts["undecodable"] += 1
            return None

    def handle(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int = 0) -> None:
        kind = self.topics.get(topic)
        if kind == "raw":
            self._answers(value, key, partition)
            return
        rec = self._decoded(value)
        if kind == "feedback" and isinstance(rec, Feedback):
            try:
                lo, hi = self.cfg.streams.rating_scale
                found = grades(rec, (lo, hi))
            except BadFeedback:
                self.counts["refused_grades"] += 1
                return  # the streams reject it with its reason
            for g in found:
                if reward_refusal(g.reward, self.cfg.streams) is not None:
                    self.counts["refused_grades"] += 1
                    continue
                self.counts["grades"] += 1
                self.counts["evidence"] += int(self.state.graded(g.experience_id, g.reward))
        elif kind == "weights" and isinstance(rec, WeightVersion):
            whose = lineage_of(rec.model, self.state.model)
            if whose is None:
                return
            why: str | None
            if whose not in self.lineages:
                why = f"lineage {whose!r} is not one this config trains (run.trainers)"
            else:
                why = refusal(rec, self.cfg, self.state.newest.get(whose), transport=self.transport)
            if why is not None:
                self.counts["refused_weights"] += 1
                self.report(f"gate: weights {label(whose, rec.version)} not a candidate: {why}")
                return
            self.state.published(rec.version, whose)
        elif kind == "metrics" and isinstance(rec, TrainerMetric) and rec.kind == "eval" and "reward" in rec.values:
            whose = lineage_of(rec.model, self.state.model)
            if whose is not None and whose in self.lineages:
                self.state.evaluated(rec.version, float(rec.values["reward"]), whose)

    def _answers(self, value: bytes | None, key: bytes | None, partition: int) -> None:
        """A live group's answers that the streams keep (any other record on raw is not the gate's)."""
        g, kept = live_answers(value, key, partition, self.raw_partitions, self.read_group, self.cfg.streams)
        if g is None:
            return
        lineage = g.metadata.get("gate_lineage", "")  # serve names whose version answered
        self.counts["refused_answers"] += g.size - len(kept)
        for i in kept:
            e = g.samples[i]
            self.state.served(e.experience_id, e.model_version, g.created_at, lineage)
            self.counts["answers"] += 1

    # -- deciding ------------------------------------------------------------------------------------------
    def decide(self, producer) -> list[GateDecision]:
        made = self.state.look()
        for d in made:
            self._write(producer, d)
            self.counts["decisions"] += 1
            self.report(f"gate: {d.decision} {label(d.lineage, d.version)} (serving {label(d.serving_lineage, d.serving)}"
                        + (f", {label(d.lineage, d.candidate)} on canary" if d.candidate is not None else "")
                        + f"): {d.reason}")
        return made

    def _write(self, producer, d: GateDecision) -> None:
        """One decision, acknowledged by every in-sync replica before the next is made (or the gate stops loudly:
        its state already holds it, so going on would serve by a decision the log does not have)."""
        errors: list[str] = []
        producer.produce(self.cfg.topics.decisions.name, key=d.model.encode(), value=self.encode(d, topic_context(self.cfg.topics.decisions.name)),
                         on_delivery=lambda err, _m: errors.append(err.str()) if err else None)
        if producer.flush(self.cfg.request_timeout_s * 3) or errors:
            raise RftbusError(f"decision {d.decision_id} not written to {self.cfg.topics.decisions.name}: "
                              f"{errors or 'not acknowledged in time'}")

    def _caught_up(self, consumer) -> bool:
        if not self.ends:
            return True
        done = [tp for tp in consumer.position([TopicPartition(t, p) for t, p in self.ends])
                if tp.offset >= 0 and tp.offset >= self.ends[(tp.topic, tp.partition)]]
        for tp in done:
            self.ends.pop((tp.topic, tp.partition), None)
        return not self.ends

    def run(self, until: Callable[[], bool] = lambda: False) -> None:
        adopted = self.read_decisions()
        self.report(f"gate: {adopted} earlier decision(s) read back; serving "
                    f"{self.state.serving if self.state.serving is not None else 'not chosen yet'}")
        consumer = make_consumer(self.cfg, f"{self.cfg.gate.id}-reader", **{"enable.auto.commit": False})
        producer = make_producer(self.cfg)
        try:
            assign = []
            for topic in self.topics:
                md = consumer.list_topics(topic, timeout=30).topics.get(topic)
                if md is None or md.error is not None:
                    raise RftbusError(f"topic {topic} is not there (create the topics first: rftbus topics create)")
                if topic == self.cfg.topics.raw.name:
                    self.raw_partitions = len(md.partitions)
                for p in md.partitions:
                    low, high = retry_kafka(partial(consumer.get_watermark_offsets, TopicPartition(topic, p),
                                                    timeout=30), f"the ends of {topic}")
                    if high > low:
                        self.ends[(topic, p)] = high
                    assign.append(TopicPartition(topic, p, low))
            consumer.assign(assign)
            last_look = last_status = 0.0
            while not self._stop.is_set() and not until():
                for msg in consume_ready(consumer, 500, 0.5):
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.report(f"gate: reading {msg.topic()}: {err.str()}")
                        continue
                    self.handle(msg.topic() or "", msg.value(), msg.key(), msg.partition() or 0)
                if self._caught_up(consumer) and time.monotonic() - last_look >= 0.2:
                    self.decide(producer)
                    last_look = time.monotonic()
                if time.monotonic() - last_status >= 1.0:
                    self._write_status()
                    last_status = time.monotonic()
        finally:
            consumer.close()
            producer.flush(10)

    def stop(self) -> None:
        self._stop.set()

    def _write_status(self) -> None:
        s = self.state
        write_status(self.cfg.state_dir, "gate", self.cfg.gate.id, {
            "serving": s.serving.version if s.serving else None, "serving_lineage": s.serving.lineage if s.serving
            else None, "candidate": s.candidate.version if s.candidate else None,
            "candidate_lineage": s.candidate.lineage if s.candidate else None,
            "canary_share": self.cfg.gate.canary_share, "looks": s.looks, "newest": s.newest.get("", -1),
            "newest_by_lineage": dict(s.newest), "caught_up": not self.ends, **self.counts,
            "arms": {str(v): {"n": a.n, "mean": round(a.mean, 4)} for v, a in s.arms.items()}})
