"""Kafka message -> table rows (pure): decode with the rftbus codec, check the record fits its topic.

A message that does not decode, or holds another record type than its topic carries, becomes one
`undecodable` row with the codec's reason; it never stops the sink. A group fans out into one
`experiences` row per experience (on a curated lane: per survivor, the ones the trainer may learn from).
Trainer `trained` metrics (the lineage of a durable checkpoint, values = {experience_id: staleness})
also fan out into `trained` rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rftbus.ground.kafka import registry
from rftbus.ground.schemas import (
    AvroRecord, DecodeError, ExperienceGroup, Feedback, GateDecision, Rejection, Task, TrainerMetric, WeightVersion,
)

TRAINED_KIND = "trained"  # TrainerMetric.kind of the trainer's lineage records (rftbus/trainer/metrics.py)

# TopicsConfig key -> the record class its messages hold (the registry's).
TOPIC_RECORDS: dict[str, type[AvroRecord]] = {t.key: t.value for t in registry.TOPICS if t.value is not None}

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Position:
    topic: str  # TopicsConfig key
    kafka_topic: str
    partition: int
    offset: int
    kafka_ts_ms: int
    key: bytes | None = None

    def columns(self) -> Row:
        return {"topic": self.topic, "kafka_topic": self.kafka_topic, "partition": self.partition,
                "offset": self.offset, "kafka_ts": ts(self.kafka_ts_ms)}


def ts(ms: int | None) -> str | None:
    """Int milliseconds as the text ClickHouse parses into DateTime64(3) exactly (seconds.millis)."""
    if ms is None:
        return None
    ms = max(0, int(ms))
    return f"{ms // 1000}.{ms % 1000:03d}"


def _f(x: float | None) -> float | None:
    """Finite float or None: JSON has no NaN, and a NaN reward means 'no reward' to a report anyway."""
    return float(x) if x is not None and math.isfinite(x) else None


def _fmap(d: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in d.items() if v is not None and math.isfinite(v)}


CURATED = registry.keys(curated=True)


def _experiences(g: ExperienceGroup, topic: str) -> list[Row]:
    """One row per experience of the group (on a curated lane, per survivor)."""
    n = len(g.samples)  # survivors that do not index the samples (a hostile record) make no row
    kept = [i for i in g.survivors if 0 <= i < n] if topic in CURATED else range(n)
    common = {"group_id": g.group_id, "task_id": g.task_id, "group_size": len(g.samples),
              "prompt_tokens": len(g.prompt_ids), "priority": _f(g.priority) or 0.0, "source": g.source.value,
              "explorer_id": g.explorer_id, "prompt_text": g.prompt_text, "created_at": ts(g.created_at),
              **_images(g.images)}
    out = []
    for i in kept:
        e = g.samples[i]
        lp = e.logprobs
        out.append({
            **common, "experience_id": e.experience_id, "sample_index": i, "response_tokens": len(e.response_ids),
            "trainable_tokens": sum(1 for m in e.loss_mask if m), "mean_logprob": _f(sum(lp) / len(lp)) if lp else None,
            "reward": _f(e.reward), "reward_components": _fmap(e.reward_components), "advantage": _f(e.advantage),
            "model_version": e.model_version, "response_text": e.response_text, "finish_reason": e.finish_reason,
            "generation_ms": _f(e.generation_ms) or 0.0, "reward_ms": _f(e.reward_ms) or 0.0,
            "metadata": {**g.metadata, **e.metadata}})
    return out


def _task(t: Task) -> Row:
    return {"task_id": t.task_id, "taskset": t.taskset, "split": t.split, "prompt": t.prompt, "answer": t.answer,
            "workflow": t.workflow, "n_samples": t.n_samples, "priority": _f(t.priority) or 0.0,
            "created_at": ts(t.created_at), "metadata": dict(t.metadata), "parent_task_id": t.parent_task_id,
            "synthesizer": t.synthesizer, "generation": t.generation, "parent_outcome": t.parent_outcome,
            **_images(t.images)}


def _images(images: list) -> Row:
    """A prompt's images as the analytics tables hold them: metadata, never the bytes ('' uri: inline)."""
    return {"image_sha256": [i.sha256 for i in images], "image_bytes": [int(i.size) for i in images],
            "image_uris": [i.uri or "" for i in images]}


def _rejection(r: Rejection) -> Row:
    return {"rejection_id": r.rejection_id, "experience_id": r.experience_id, "group_id": r.group_id,
            "experience_ids": r.covers(), "reason": r.reason,
            "detail": r.detail, "stage": r.stage, "source_topic": r.source_topic, "source_partition": r.partition,
            "source_offset": r.offset, "original_bytes": None if r.original is None else len(r.original),
            "created_at": ts(r.created_at)}


def _feedback(f: Feedback) -> Row:
    return {"feedback_id": f.feedback_id, "experience_id": f.experience_id, "kind": f.kind.value,
            "reward": _f(f.reward), "rating": _f(f.rating), "thumbs_up": f.thumbs_up, "preferred_id": f.preferred_id,
            "rejected_id": f.rejected_id, "correction": f.correction, "annotator": f.annotator,
            "created_at": ts(f.created_at), "metadata": dict(f.metadata)}


def _weights(w: WeightVersion) -> Row:
    return {"weight_id": f"{w.model}:{w.version}", "model": w.model, "version": w.version, "step": w.step,
            "uri": w.uri, "sha256": w.sha256, "bytes": w.bytes, "format": w.format,
            "created_at": ts(w.created_at), "metadata": dict(w.metadata)}


def _metric(m: TrainerMetric) -> Row:
    return {"metric_id": m.metric_id, "model": m.model, "kind": m.kind, "step": m.step, "version": m.version,
            "values": _fmap(m.values), "created_at": ts(m.created_at)}


def _decision(d: GateDecision) -> Row:
    return {"decision_id": d.decision_id, "model": d.model, "decision": d.decision, "version": d.version,
            "serving": d.serving, "candidate": d.candidate, "canary_share": d.canary_share, "gate": d.gate,
            "reason": d.reason, "test": d.test, "evidence": _fmap(d.evidence), "created_at": ts(d.created_at),
            "lineage": d.lineage, "serving_lineage": d.serving_lineage}


def _trained(m: TrainerMetric) -> list[Row]:
    return [{"metric_id": m.metric_id, "experience_id": eid, "model": m.model, "step": m.step,
             "version": m.version, "staleness": int(s), "trained_at": ts(m.created_at)}
            for eid, s in m.values.items() if s is not None and math.isfinite(s)]


_CONVERT: dict[type, tuple[str, Any]] = {Task: ("tasks", _task), Rejection: ("rejections", _rejection),
            Feedback: ("feedback", _feedback), WeightVersion: ("weights", _weights), TrainerMetric: ("metrics", _metric),
            GateDecision: ("decisions", _decision)}


def undecodable(pos: Position, value: bytes | None, reason: str, detail: str) -> list[tuple[str, Row]]:
    key = None if pos.key is None else pos.key.decode("utf-8", "replace")
    return [("undecodable", {**pos.columns(), "reason": reason, "detail": detail[:500],
                             "size": len(value or b""), "key": key})]


def to_rows(decode, pos: Position, value: bytes | None) -> list[tuple[str, Row]]:
    """(table, row) pairs for one message; `decode` is a generic (any rftbus record) deserializer.

    Only DecodeError (bad bytes) becomes an undecodable row here; anything else (a registry outage)
    is not the record's fault and propagates.
    """
    if value is None:
        return undecodable(pos, value, "tombstone", "null value (a compaction tombstone)")
    try:
        rec = decode(value, None)
    except DecodeError as e:
        return undecodable(pos, value, e.reason, e.detail)
    want = TOPIC_RECORDS[pos.topic]
    if type(rec) is not want:
        return undecodable(pos, value, "wrong_record_type",
                           f"{type(rec).__name__} on a topic that carries {want.__name__}")
    try:
        if isinstance(rec, ExperienceGroup):
            return [("experiences", {**pos.columns(), **row}) for row in _experiences(rec, pos.topic)]
        table, convert = _CONVERT[want]
        row = convert(rec)
    except (TypeError, ValueError, AttributeError, IndexError) as e:  # a value a column cannot hold
        return undecodable(pos, value, "unconvertible", f"{type(e).__name__}: {e}")
    out = [(table, {**pos.columns(), **row})]
    if isinstance(rec, TrainerMetric) and rec.kind == TRAINED_KIND:
        out += [("trained", {**pos.columns(), **r}) for r in _trained(rec)]
    return out
