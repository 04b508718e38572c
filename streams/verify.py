"""Verify stage: one raw record's bytes -> an ExperienceView, or the reason it is rejected.

Pure logic (no Kafka, no Faust), so every reason is unit-testable; the worker calls it per record.
The streams never need an Experience's token arrays, only their lengths and that the logprobs are
finite, so a record written with the current schema is skimmed (schemas/skim.py) instead of decoded
into lists, and its curated form is spliced from the bytes as read. Everything else (older writer
schemas, other writers' block layouts, bad bytes) is decoded in full, which keeps rejection reasons
exactly what a full decode reports.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from rftbus.schemas import AvroRecord, Codec, DecodeError, Experience, Source
from rftbus.schemas.skim import Skim, Skimmer

# DecodeError reasons that mean "these bytes name a schema we cannot use" rather than "garbage".
SCHEMA_DECODE_REASONS = frozenset({"unknown_schema", "no_registry", "wrong_record_type"})
ARRAYS = ("prompt_ids", "response_ids", "logprobs", "loss_mask")
# The view's fields that are Experience fields; any of them changed is written back by to_bytes.
FIELDS = ("experience_id", "group_id", "task_id", "sample_index", "group_size", "reward", "advantage",
          "priority", "model_version", "source", "metadata")


@dataclass(slots=True, eq=False)
class ExperienceView:
    """What the streams read and set of one Experience: the scalar fields and the arrays' lengths.

    Changes are made by assigning fields (advantage, priority, metadata; experience_id for a promoted
    copy, via ``copy``); ``to_bytes`` writes them into the record as read. The arrays are never here.
    """

    experience_id: str
    group_id: str
    task_id: str
    sample_index: int
    group_size: int
    reward: float | None
    advantage: float | None
    priority: float
    model_version: int
    source: Source
    metadata: dict[str, str]
    lengths: dict[str, int]  # ARRAYS -> item count
    logprobs_finite: bool
    _reader: "ExperienceReader"
    _as_read: dict[str, Any]  # FIELDS as read, to see what changed
    _skim: Skim | None = None  # the record's bytes, skimmed (writer schema = current schema)
    _record: Experience | None = None  # the record decoded in full, otherwise

    def copy(self, **changes: Any) -> "ExperienceView":
        return dataclasses.replace(self, **changes)

    def changes(self) -> dict[str, Any]:
        """Fields that differ from the record as read (dicts compare with their order: it is in the bytes)."""
        out = {}
        for name in FIELDS:
            value, was = getattr(self, name), self._as_read[name]
            if value is not was and (value != was or (value.__class__ is dict and list(value) != list(was))):
                out[name] = value
        return out

    def record(self) -> Experience:
        """The full Experience with this view's changes (decodes the bytes if they were only skimmed)."""
        rec = self._record if self._record is not None else self._reader.decode(self._skim.data)
        return Experience(**{**rec.to_avro(), **self.changes()})

    def to_bytes(self) -> bytes:
        """The record with this view's changes, encoded exactly as ``codec.encode(self.record())`` would."""
        if self._skim is not None:
            out = self._reader.skimmer.splice(self._skim, self.changes())
            if out is not None:
                return out
        return self._reader.encode(self.record())


class ExperienceReader:
    """bytes -> ExperienceView (skimmed when it can be, decoded in full otherwise), or the other record
    the bytes hold; DecodeError for bad bytes, from the full decode."""

    def __init__(self, codec: Codec):
        self.skimmer = Skimmer(codec, Experience)
        self.decode = codec.deserializer()
        self.encode = codec.serializer(Experience)

    def __call__(self, data: bytes) -> ExperienceView | AvroRecord | None:
        skim = self.skimmer.skim(data)
        if skim is not None:
            v = skim.values
            return ExperienceView(
                v["experience_id"], v["group_id"], v["task_id"], v["sample_index"], v["group_size"], v["reward"],
                v["advantage"], v["priority"], v["model_version"], Source(v["source"]), dict(v["metadata"]),
                skim.lengths, "logprobs" not in skim.nonfinite, self, v, _skim=skim)
        rec = self.decode(data, None)
        return self.view(rec) if isinstance(rec, Experience) else rec

    def view(self, e: Experience) -> ExperienceView:
        """The view of a decoded record (kept whole: its output is encoded, not spliced)."""
        as_read = {name: getattr(e, name) for name in FIELDS}
        # A sum is finite iff every term is (logprobs are far from float overflow): one C loop, not n checks.
        return ExperienceView(**{**as_read, "metadata": dict(e.metadata)},
                              lengths={name: len(getattr(e, name)) for name in ARRAYS},
                              logprobs_finite=math.isfinite(sum(e.logprobs)), _reader=self, _as_read=as_read,
                              _record=e)


@dataclass(slots=True)
class Verdict:
    experience: ExperienceView | None
    reason: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


def decode_experience(data: bytes | None, read: ExperienceReader, max_bytes: int) -> Verdict:
    """Read and check the shape; version checks need the follower and happen after."""
    if data is None:
        return Verdict(None, "malformed", "null value (tombstone) on the raw topic")
    if len(data) > max_bytes:
        return Verdict(None, "too_large", f"{len(data)} bytes > streams.max_message_bytes={max_bytes}")
    try:
        rec = read(data)
    except DecodeError as e:
        reason = "schema" if e.reason in SCHEMA_DECODE_REASONS else "malformed"
        return Verdict(None, reason, f"{e.reason}: {e.detail}")
    if not isinstance(rec, ExperienceView):
        return Verdict(None, "schema", f"expected rftbus.Experience, got {type(rec).SCHEMA_NAME}")
    return check_experience(rec)


def check_experience(e: ExperienceView) -> Verdict:
    if e.group_size < 1 or not 0 <= e.sample_index < e.group_size:
        return Verdict(e, "schema", f"sample_index {e.sample_index} outside group_size {e.group_size}")
    if not e.experience_id or not e.group_id:
        return Verdict(e, "schema", "empty experience_id or group_id")
    n = e.lengths["response_ids"]
    if not n:
        return Verdict(e, "schema", "empty response_ids")
    n_lp, n_mask = e.lengths["logprobs"], e.lengths["loss_mask"]
    if n_lp != n or n_mask != n:
        return Verdict(e, "length_mismatch", f"response_ids {n}, logprobs {n_lp}, loss_mask {n_mask}")
    if not e.logprobs_finite:
        return Verdict(e, "schema", "logprobs contain NaN or inf")
    if e.reward is not None and not math.isfinite(e.reward):
        return Verdict(e, "non_finite_reward", f"reward {e.reward}")
    return Verdict(e)


def check_version(e: ExperienceView, latest: int) -> Verdict:
    """Known = 0 <= model_version <= latest published (v0 always exists: it is built from the seed)."""
    if e.model_version < 0 or e.model_version > latest:
        return Verdict(e, "unknown_version", f"model_version {e.model_version}, latest published {latest}")
    return Verdict(e)


def check_limits(e: ExperienceView, max_tokens: int, reward_min: float, reward_max: float) -> Verdict:
    """Per-experience filters (stage filter); the group still counts the sample as arrived."""
    tokens = e.lengths["prompt_ids"] + e.lengths["response_ids"]
    if tokens > max_tokens:
        return Verdict(e, "over_length", f"{tokens} tokens > streams.max_tokens={max_tokens}")
    if e.reward is not None and not reward_min <= e.reward <= reward_max:
        return Verdict(e, "reward_out_of_range", f"reward {e.reward} outside [{reward_min}, {reward_max}]")
    return Verdict(e)
