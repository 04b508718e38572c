"""The traces stage: topics.spans -> experience groups on raw, grades on feedback, refusals on rejected.

Each record is one OTLP trace export (the Collector's Kafka exporter, `encoding: otlp_proto`, keyed by trace id).
It is read whole (episodes.py) and its outputs written like every stage's (outputs.py): each names the record, its
index and their count, so after a kill the recovery scan finds what already landed and only the rest is written
again. A group goes to the raw partition its group id hashes to (the ingest's dedupe and the live table expect it
there), a grade to the feedback partition its experience id hashes to; the scan of a spans partition therefore reads
every raw and feedback partition (`output_partitions`). The ids are the trace's, so a span the Collector exports
twice becomes a `duplicate` at the ingest, not a second answer.

**Grades join across exports.** The Collector keys a trace's spans by its trace id (hex) and partitions them with
Kafka's murmur2, as serve keys the grade span it writes for /v1/feedback `trace_id`: one partition sees all of a
trace. The changelogged table `traces` (trace id -> the calls still waiting for a grade, and the trace's grade) joins
them in either order: a grade reaches every call already written (a Feedback each, to topics.feedback, where the live
join takes it as any grade), and a call that comes after it carries it in its record. An entry is forgotten
`streams.feedback_ttl_s` after it last changed. The table's changes are redone when a record is read again after a
kill (the checkpoint's redo topics), so replays decide the same.

Refusals are one rejection per reason per record (stage `traces`), naming the spans: `malformed` (not an OTLP
export: the record's bytes are its evidence), `too_large`, `not_genai` (a span that is no model call and carries
no grade: an agent's own spans), `no_content` (a model call recorded without its messages), `unknown_model`
(another model answered), `malformed_span`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.schemas import topic_context
from rftbus.streams.checkpoint.landed import Landed
from rftbus.streams.outputs import Output
from rftbus.ground.grades.rules import Grade, apply_grade
from rftbus.streams.join import ScanClock
from rftbus.streams.traces.episodes import Episodes, OtlpError, TraceGrade

log = logging.getLogger("rftbus.streams")

STAGE = "traces"
SHOWN = 5  # spans named in a rejection's detail (the count is always whole)
MAX_WAITING_CALLS = 1024  # calls of one trace kept for its grade (an agent's episode; a runaway loop is cut here)


def episodes_for(cfg: Any) -> Episodes:
    """The reader of `cfg`'s traces: its tokenizer and chat template, the model name serve answers as."""
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.ground.models.prompt import prompt_format

    tokenizer = load_tokenizer(cfg.model)
    return Episodes(prompt_format(tokenizer, cfg.model), cfg.serve.served_model or cfg.model.name,
                    cfg.otel.grade_attribute, cfg.otel.session_attribute)


@dataclass
class TraceState:
    """What the table keeps of a trace: where it lives, when it last changed, its ungraded calls, its grade."""

    partition: int
    changed_ms: int
    calls: list[str] = field(default_factory=list)
    grade: TraceGrade | None = None

    def pack(self) -> bytes:
        g = self.grade
        return json.dumps({"p": self.partition, "t": self.changed_ms, "calls": self.calls,
                           "g": None if g is None else [g.value, g.span_id, g.annotator, g.at_ms]}).encode()

    @classmethod
    def unpack(cls, trace_id: str, raw: bytes) -> TraceState:
        d = json.loads(raw)
        g = d.get("g")
        return cls(d["p"], d["t"], list(d["calls"]), None if g is None else TraceGrade(trace_id, *g))


class Traces:
    """Handlers for the traces agent; `emit` is the Emitter (roles raw and feedback included), `table` the Faust
    table `traces`."""

    def __init__(self, cfg: Any, emit: Any, counters: Any, episodes: Episodes, table: Any):
        self.cfg = cfg
        self.emit = emit
        self.counters = counters
        self.episodes = episodes
        self.table = table
        self.scans = ScanClock(cfg.streams)  # per partition
        self.checkpoint: Any = None  # set by the app

    async def handle(self, event: Any) -> None:
        msg = event.message
        landed = await self.checkpoint.begin(msg)
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        if src in landed.done:
            self.counters.inc("replays_skipped")
            return
        self.counters.inc("traces.records")
        outs = self.outputs(msg, src)
        await self.emit.outputs(outs, src=src, p=msg.partition, latest=-1, landed=landed.indices(src))
        landed.finished(src)
        self.expire(msg.partition)

    def outputs(self, msg: Any, src: str) -> list[Output]:
        """Every output of one spans record, in a fixed order (a replay writes the same list's missing indices);
        the table's entries of its traces updated."""
        value = msg.value
        limit = self.cfg.streams.max_message_bytes
        if value is None:
            return self._whole("malformed", "null value (tombstone) on the spans topic", src, msg, None)
        if len(value) > limit:
            return self._whole("too_large", f"{len(value)} bytes > streams.max_message_bytes={limit}", src, msg,
                               None)
        try:
            read = self.episodes.read(value)
        except OtlpError as e:
            return self._whole("malformed", str(e), src, msg, value)
        self.counters.inc("traces.spans", read.spans)
        now = int(time.time() * 1000)
        states: dict[str, TraceState] = {}

        def state(trace_id: str) -> TraceState:
            if trace_id not in states:
                raw = self.table.get(trace_id.encode())
                states[trace_id] = (TraceState.unpack(trace_id, raw) if raw is not None
                                    else TraceState(msg.partition, now))
            return states[trace_id]

        outs: list[Output] = []
        for trace_id, tg in read.grades.items():  # a trace's grade: every call already written gets it
            st = state(trace_id)
            outs += [self._keyed("feedback", eid, tg.feedback(eid)) for eid in st.calls]
            self.counters.inc("traces.grades")
            st.calls, st.grade = [], tg
        for g in read.groups:
            st = state(g.metadata["trace_id"])
            s = g.samples[0]
            if s.reward is None and st.grade is not None:  # graded before it came: the record carries it
                apply_grade(s, Grade(s.experience_id, st.grade.value, {
                    "feedback_kind": "trace_grade", "feedback_id": st.grade.feedback(s.experience_id).feedback_id}))
            elif s.reward is None and len(st.calls) < MAX_WAITING_CALLS:
                st.calls.append(s.experience_id)
            outs.append(self._keyed("raw", g.group_id, g))
        for trace_id, st in states.items():
            st.changed_ms = now
            self.table[trace_id.encode()] = st.pack()
        self.counters.inc("traces.calls", len(read.groups))
        for reason, refused in sorted(read.refused.items()):
            self.counters.reject(reason, STAGE, len(refused))
            self.counters.inc(f"traces.rejected_spans.{reason}", len(refused))
            shown = "; ".join(d for _, d in refused[:SHOWN])
            more = f" (and {len(refused) - SHOWN} more)" if len(refused) > SHOWN else ""
            outs.append(self._rejection(reason, f"{len(refused)} span(s): {shown}{more}", src, msg, None))
        return outs

    def expire(self, partition: int) -> None:
        """Entries of `partition` unchanged for streams.feedback_ttl_s are forgotten (their calls, still ungraded,
        are rejected `no_feedback` by the live join at the same TTL). A scan reads the whole table: when due."""
        if not self.scans.due(partition):
            return
        cutoff = int(time.time() * 1000) - self.cfg.streams.feedback_ttl_s * 1000
        due = [k for k, raw in self.table.items() if (d := json.loads(raw))["p"] == partition and d["t"] < cutoff]
        for key in due:
            del self.table[key]

    def _keyed(self, role: str, key: str, record: Any) -> Output:
        """A record for `role`'s topic under `key`, to the partition the key hashes to (Kafka's murmur2)."""
        k = key.encode()
        return Output(role, k, self.emit.encode(record, topic_context(self.emit.names[role])),
                      self.emit.key_partition(role, k))

    def _whole(self, reason: str, detail: str, src: str, msg: Any, original: bytes | None) -> list[Output]:
        """The record refused whole: its one output."""
        self.counters.reject(reason, STAGE)
        self.counters.inc(f"traces.rejected_records.{reason}")
        return [self._rejection(reason, detail, src, msg, original)]

    def _rejection(self, reason: str, detail: str, src: str, msg: Any, original: bytes | None) -> Output:
        value = self.emit.rejection(reason=reason, detail=detail, stage=STAGE, src=src, original=original)
        return Output("rejected", msg.key, value)

    async def on_error(self, event: Any, exc: BaseException) -> None:
        """A spans record that raised: a `processing_error` rejection, never an acknowledgement alone."""
        msg = event.message
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        landed = self.checkpoint.landed_of(msg.topic, msg.partition) or Landed.empty(self.cfg)
        if src in landed.done:
            return
        self.counters.reject("processing_error", STAGE)
        await self.emit.reject(reason="processing_error", detail=f"{type(exc).__name__}: {exc}", stage=STAGE, src=src,
                               original=None, key=msg.key, p=msg.partition)
        landed.finished(src)
