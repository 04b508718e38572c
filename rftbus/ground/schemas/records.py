"""Typed records mirroring the ``.avsc`` files field for field (tests keep them from drifting).

Why dataclasses and not the fastavro dicts: producers and consumers get attribute access, enums
and defaults (a fresh id and timestamp on every record) while ``to_avro``/``from_avro`` stay a
shallow dict build / ``cls(**d)``: token and logprob lists are handed to fastavro as they are,
never copied. Timestamps are ``int`` milliseconds since the Unix epoch (UTC).

Evolution: a field added here must be added to the ``.avsc`` with a default (and the new schema
published under ``history/``); field order here is the order in the schema.
"""

from __future__ import annotations

import enum
import math
import operator
import time
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

from typing_extensions import dataclass_transform

R = TypeVar("R", bound="AvroRecord")


def new_id() -> str:
    """A fresh record id (uuid4, 32 hex chars)."""
    return uuid.uuid4().hex


def now_ms() -> int:
    """Wall-clock time in integer milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


class Source(str, enum.Enum):
    """Where an Experience came from (Avro enum rftbus.Source)."""

    explorer = "explorer"
    live = "live"
    human = "human"
    expert = "expert"
    trace = "trace"  # a model call read from an agent's OpenTelemetry trace (rftbus/streams/traces/): graded like live


class FeedbackKind(str, enum.Enum):
    """Which optional field of a Feedback carries the signal (Avro enum rftbus.FeedbackKind)."""

    reward = "reward"
    rating = "rating"
    thumbs = "thumbs"
    preference = "preference"
    correction = "correction"


class AvroRecord:
    """Base of all records: shallow conversion to and from fastavro's dict form."""

    __slots__ = ()
    SCHEMA_NAME: ClassVar[str]  # full Avro name, e.g. "rftbus.Experience"
    KEY_FIELD: ClassVar[str | None] = None  # field used as the Kafka key, if any
    AVRO_FIELDS: ClassVar[tuple[str, ...]]  # set by _record, in schema order
    _get_all: ClassVar[Any]

    def to_avro(self) -> dict[str, Any]:
        """Dict for fastavro; values are shared with the record, not copied."""
        return dict(zip(self.AVRO_FIELDS, self._get_all(self)))

    @classmethod
    def from_avro(cls: type[R], d: dict[str, Any]) -> R:
        """Record from a fastavro dict read with this record's current schema."""
        return cls(**d)

    def kafka_key(self) -> str | None:
        """The Kafka message key for this record (None when the record type has no key field)."""
        return getattr(self, self.KEY_FIELD) if self.KEY_FIELD else None


RECORD_TYPES: dict[str, type[AvroRecord]] = {}


@dataclass_transform(kw_only_default=True, field_specifiers=(field,))
def _record(cls):
    """Make ``cls`` a slotted keyword-only dataclass and register it under its SCHEMA_NAME."""
    cls = dataclass(slots=True, kw_only=True)(cls)
    cls.AVRO_FIELDS = tuple(f.name for f in fields(cls))
    cls._get_all = operator.attrgetter(*cls.AVRO_FIELDS)
    RECORD_TYPES[cls.SCHEMA_NAME] = cls
    return cls


def record_class(name: str) -> type[AvroRecord]:
    """Record class for an Avro name (``"Experience"`` or ``"rftbus.Experience"``)."""
    return RECORD_TYPES[name if "." in name else f"rftbus.{name}"]


@_record
class Image(AvroRecord):
    """One image of a prompt: inline bytes or a store reference, always with its sha256 and size
    (rftbus/ground/images/ makes, admits and reads them). It travels inside a Task or a group."""

    SCHEMA_NAME: ClassVar[str] = "rftbus.Image"

    media_type: str
    sha256: str
    size: int
    data: bytes | None = None
    uri: str | None = None
    width: int = 0
    height: int = 0


def _images(images: list) -> list[Image]:
    """A record's images as Image records (fastavro decodes nested records to dicts)."""
    return [Image(**d) if d.__class__ is dict else d for d in images]


def _images_avro(images: list) -> list:
    return [i if i.__class__ is dict else i.to_avro() for i in images]


JSON_COLUMNS = "rftbus.json_columns"  # Task.metadata key: which columns hold JSON text (a data row's typed values)


@_record
class Task(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = "rftbus.Task"
    KEY_FIELD: ClassVar[str | None] = "task_id"

    task_id: str = field(default_factory=new_id)
    taskset: str
    split: str = "train"
    prompt: str
    answer: str | None = None
    workflow: str | None = None  # dotted path overriding the explorer's workflow
    n_samples: int | None = None
    priority: float = 0.0
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: int = field(default_factory=now_ms)
    messages: list[dict[str, str]] | None = None  # chat turns rendered instead of `prompt` (v2)
    parent_task_id: str | None = None  # lineage of a synthesized task (v3): rftbus/producers/synthesis/
    synthesizer: str | None = None
    generation: int = 0
    parent_outcome: str | None = None
    images: list[Image] = field(default_factory=list)  # what the prompt shows (v4)

    def __post_init__(self) -> None:
        if self.images:
            self.images = _images(self.images)

    def to_avro(self) -> dict[str, Any]:
        d = dict(zip(self.AVRO_FIELDS, self._get_all(self)))
        if self.images:
            d["images"] = _images_avro(self.images)
        return d

    def columns(self) -> dict[str, Any]:
        """The data row's other columns with their types (a list stays a list): metadata, JSON-decoded where the
        taskset encoded a value that was not a string (JSON_COLUMNS)."""
        import json

        coded = set(json.loads(self.metadata[JSON_COLUMNS])) if JSON_COLUMNS in self.metadata else set()
        return {k: json.loads(v) if k in coded else v for k, v in self.metadata.items() if k != JSON_COLUMNS}


@_record
class Experience(AvroRecord):
    """One sample of an ExperienceGroup. It has no Kafka key of its own: it travels inside its group."""

    SCHEMA_NAME: ClassVar[str] = "rftbus.Experience"

    experience_id: str = field(default_factory=new_id)
    response_ids: list[int]
    logprobs: list[float]  # behaviour policy, one per response token
    loss_mask: list[bool]  # one per response token; False for env/tool tokens
    reward: float | None = None
    reward_components: dict[str, float] = field(default_factory=dict)
    advantage: float | None = None  # set by the streams for survivors
    model_version: int
    response_text: str | None = None
    finish_reason: str | None = None
    generation_ms: float = 0.0
    reward_ms: float = 0.0
    metadata: dict[str, str] = field(default_factory=dict)
    behaviour_logprobs: bool = True  # False: no behaviour logprobs came with it (a traced answer; zeros in logprobs)


@_record
class ExperienceGroup(AvroRecord):
    """One task x n samples: the record on every experience topic (raw, curated lanes, expert)."""

    SCHEMA_NAME: ClassVar[str] = "rftbus.ExperienceGroup"
    KEY_FIELD: ClassVar[str | None] = "group_id"

    group_id: str = field(default_factory=new_id)
    task_id: str
    source: Source = Source.explorer
    explorer_id: str
    prompt_ids: list[int]
    prompt_text: str | None = None
    samples: list[Experience]
    survivors: list[int] = field(default_factory=list)  # sample indices kept by the streams
    priority: float = 0.0
    created_at: int = field(default_factory=now_ms)
    metadata: dict[str, str] = field(default_factory=dict)
    images: list[Image] = field(default_factory=list)  # the prompt's images, the task's records (v3)

    def __post_init__(self) -> None:
        if self.source.__class__ is not Source:
            self.source = Source(self.source)
        samples = self.samples
        if samples and samples[0].__class__ is dict:  # as fastavro decodes the nested records
            self.samples = [Experience(**d) for d in samples]
        if self.images:
            self.images = _images(self.images)

    def to_avro(self) -> dict[str, Any]:
        d = dict(zip(self.AVRO_FIELDS, self._get_all(self)))
        d["samples"] = [s if s.__class__ is dict else s.to_avro() for s in self.samples]
        if self.images:
            d["images"] = _images_avro(self.images)
        return d

    def kept(self) -> list[Experience]:
        """The samples the streams kept, in sample order (all of them before the streams ran)."""
        if not self.survivors:
            return list(self.samples)
        return [self.samples[i] for i in self.survivors]

    def experience_ids(self) -> list[str]:
        return [s.experience_id for s in self.samples]


@_record
class Feedback(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = "rftbus.Feedback"
    KEY_FIELD: ClassVar[str | None] = "experience_id"  # co-partitioned with what it rates

    feedback_id: str = field(default_factory=new_id)
    experience_id: str
    kind: FeedbackKind
    reward: float | None = None
    rating: float | None = None
    thumbs_up: bool | None = None
    preferred_id: str | None = None
    rejected_id: str | None = None
    correction: str | None = None
    annotator: str | None = None
    created_at: int = field(default_factory=now_ms)
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind.__class__ is not FeedbackKind:
            self.kind = FeedbackKind(self.kind)


def rating_problem(rating: float | None, scale: tuple[float, float]) -> str | None:
    """The one rating rule, over HTTP and over Kafka alike: a rating is a finite number on the scale (#36: a
    Kafka rating of 6 on 1..5 was clamped and trained while HTTP refused it)."""
    lo, hi = scale
    if rating is None or not math.isfinite(rating):
        return f"rating {rating} is not a number on streams.rating_scale {lo:g}..{hi:g}"
    if not lo <= rating <= hi:
        return f"rating {rating:g} is outside streams.rating_scale {lo:g}..{hi:g}"
    return None


def rating_reward(rating: float, scale: tuple[float, float]) -> float:
    """The one rating -> reward map: the scale onto 0..1 (rftbus/ground/grades/rules.py, serve's episode credit)."""
    lo, hi = scale
    return (rating - lo) / (hi - lo)


@_record
class WeightVersion(AvroRecord):
    """Identity is (model, version); model is the key of the compacted weights topic."""

    SCHEMA_NAME: ClassVar[str] = "rftbus.WeightVersion"
    KEY_FIELD: ClassVar[str | None] = "model"

    model: str
    version: int
    step: int
    uri: str
    sha256: str
    bytes: int
    created_at: int = field(default_factory=now_ms)
    format: str = "safetensors"
    metadata: dict[str, str] = field(default_factory=dict)


@_record
class TrainerMetric(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = "rftbus.TrainerMetric"
    KEY_FIELD: ClassVar[str | None] = "model"

    metric_id: str = field(default_factory=new_id)
    model: str
    kind: str  # "progress", "metric", "eval", ...
    step: int
    version: int
    values: dict[str, float] = field(default_factory=dict)
    created_at: int = field(default_factory=now_ms)


@_record
class GateDecision(AvroRecord):
    """The promotion gate's decision about one version (rftbus/consumers/gate/): what serves whom, and why."""

    SCHEMA_NAME: ClassVar[str] = "rftbus.GateDecision"
    KEY_FIELD: ClassVar[str | None] = "model"

    decision_id: str
    model: str
    decision: str  # canary | promote | hold | rollback
    version: int
    serving: int
    candidate: int | None = None
    canary_share: float = 0.0
    gate: str
    reason: str
    test: str = ""
    evidence: dict[str, float] = field(default_factory=dict)
    created_at: int = field(default_factory=now_ms)
    lineage: str = ""  # whose `version` (and `candidate`) is: trainer.lineage; "" the first trainer
    serving_lineage: str = ""  # whose `serving` is


@_record
class Rejection(AvroRecord):
    SCHEMA_NAME: ClassVar[str] = "rftbus.Rejection"
    KEY_FIELD: ClassVar[str | None] = None  # producers reuse the original record's key

    rejection_id: str = field(default_factory=new_id)
    experience_id: str | None = None  # when the rejection is about exactly one experience
    group_id: str | None = None
    experience_ids: list[str] = field(default_factory=list)  # every experience it covers
    reason: str  # a string, not an enum: new reasons never break readers
    detail: str = ""
    stage: str  # "verify", "filter", "trainer", "explorer", ...
    source_topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    original: bytes | None = None  # the bytes as read, when they are the evidence and fit the topic
    created_at: int = field(default_factory=now_ms)

    def covers(self) -> list[str]:
        """Every experience id this rejection accounts for (v1 records name at most one)."""
        if self.experience_ids:
            return list(self.experience_ids)
        return [self.experience_id] if self.experience_id else []
