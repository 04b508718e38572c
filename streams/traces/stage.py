"""The traces stage: topics.spans -> experience groups on raw, grades on feedback, refusals on rejected.

Each record is one OTLP trace export (the Collector's Kafka exporter, `encoding: otlp_proto`, keyed by trace id).
It is read whole (episodes.py) and its outputs written like every stage's (outputs.py): each names the record, its
index and their count, so after a kill the recovery scan finds what already landed and only the rest is written
again. A group goes to the raw partition its group id hashes to (the ingest's dedupe and the live table expect it
there), a grade to the feedback partition its experience id hashes to; the scan of a spans partition therefore reads
every raw and feedback partition (`output_partitions`). The ids are the trace's, so a span the Collector exports
twice becomes a `duplicate` at the ingest, not a second answer.

Refusals are one rejection per reason per record (stage `traces`), naming the spans: `malformed` (not an OTLP
export: the record's bytes are its evidence), `too_large`, `not_genai` (a span that is no model call and carries
no grade: an agent's own spans), `no_content` (a model call recorded without its messages), `unknown_model`
(another model answered), `malformed_span`.
"""

from __future__ import annotations

import logging
from typing import Any

from rftbus.schemas import topic_context
from rftbus.streams.checkpoint.landed import Landed
from rftbus.streams.outputs import Output
from rftbus.streams.traces.episodes import Episodes, OtlpError

log = logging.getLogger("rftbus.streams")

STAGE = "traces"
SHOWN = 5  # spans named in a rejection's detail (the count is always whole)


def episodes_for(cfg: Any) -> Episodes:
    """The reader of `cfg`'s traces: its tokenizer and chat template, the model name serve answers as."""
    from rftbus.models.loading import load_tokenizer
    from rftbus.models.prompt import prompt_format

    tokenizer = load_tokenizer(cfg.model)
    return Episodes(prompt_format(tokenizer, cfg.model), cfg.serve.served_model or cfg.model.name,
                    cfg.otel.grade_attribute, cfg.otel.session_attribute)


class Traces:
    """Handlers for the traces agent; `emit` is the Emitter (roles raw and feedback included)."""

    def __init__(self, cfg: Any, emit: Any, counters: Any, episodes: Episodes):
        self.cfg = cfg
        self.emit = emit
        self.counters = counters
        self.episodes = episodes
        self.checkpoint: Any = None  # set by the app

    async def handle(self, event: Any) -> None:
        msg = event.message
        landed = await self.checkpoint.begin(msg)
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        if src in landed.done:
            self.counters.inc("replays_skipped")
            return
        self.counters.inc("span_records_in")
        outs = self.outputs(msg, src)
        await self.emit.outputs(outs, src=src, p=msg.partition, latest=-1, landed=landed.indices(src))
        landed.finished(src)

    def outputs(self, msg: Any, src: str) -> list[Output]:
        """Every output of one spans record, in a fixed order (a replay writes the same list's missing indices)."""
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
        self.counters.inc("spans_in", read.spans)
        outs: list[Output] = []
        names = self.emit.names
        for g in read.groups:
            key = g.group_id.encode()
            outs.append(Output("raw", key, self.emit.encode(g, topic_context(names["raw"])),
                               self.emit.key_partition("raw", key)))
        for tg in read.grades:
            key = tg.feedback.experience_id.encode()
            outs.append(Output("feedback", key, self.emit.encode(tg.feedback, topic_context(names["feedback"])),
                               self.emit.key_partition("feedback", key)))
        self.counters.inc("traced_calls", len(read.groups))
        self.counters.inc("trace_grades", len(read.grades))
        for reason, refused in sorted(read.refused.items()):
            self.counters.reject(reason, STAGE, len(refused))
            shown = "; ".join(d for _, d in refused[:SHOWN])
            more = f" (and {len(refused) - SHOWN} more)" if len(refused) > SHOWN else ""
            outs.append(self._rejection(reason, f"{len(refused)} span(s): {shown}{more}", src, msg, None))
        return outs

    def _whole(self, reason: str, detail: str, src: str, msg: Any, original: bytes | None) -> list[Output]:
        """The record refused whole: its one output."""
        self.counters.reject(reason, STAGE)
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
        value = self.emit.rejection(reason="processing_error", detail=f"{type(exc).__name__}: {exc}", stage=STAGE,
                                    src=src, original=None)
        await self.emit.outputs([Output("rejected", msg.key, value)], src=src, p=msg.partition, latest=-1)
        landed.finished(src)
