"""Everything the tally (rftbus.apps.run.tally) needs, read back from the logs after a run: every declared topic in full,
the trainer's lineage and its final checkpoint's positions, the committed offsets of the groups that
read raw, feedback and tasks, and the distinct record ids per topic (what the ClickHouse sink counts:
group ids on the experience topics).

Only headers and ids are kept, so a run of a few hundred thousand records fits comfortably in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka import registry
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.retry import retrying
from rftbus.ground.models.lineage import is_further_trainer_stage
from rftbus.ground.schemas import (DecodeError, ExperienceGroup, Feedback, GateDecision, Rejection, Task, TrainerMetric,
                            WeightVersion, make_codec)

Pos = tuple[str, int, int]  # topic, partition, offset
LANES = registry.keys(lane=True)
H_SRC = "rftbus-src"  # rftbus/streams/outputs.py: the raw record an output derives from


@dataclass
class RawRecord:
    experience_ids: list[str] | None  # None: not a decodable group (poison)
    group_id: str = ""
    explorer_id: str = ""
    model_version: int = -1  # the newest of its samples
    generation_ms: float = 0.0  # the slowest of its samples' generation (how long the task took to answer)
    source: str = ""


@dataclass
class LaneRecord:
    pos: Pos
    lane: str
    src: str | None  # rftbus-src header (None for records streams did not write: demonstrations, poison)
    experience_ids: list[str] | None  # what the trainer may train of it (survivors; a demonstration: all); None: poison


@dataclass
class RejRecord:
    rejection_id: str
    experience_ids: list[str]  # every experience it covers (empty: the original did not decode)
    reason: str
    stage: str
    source: Pos | None


@dataclass
class Checkpoint:
    step: int
    version: int
    positions: dict[tuple[str, int], int]  # (topic, partition) -> first offset not yet trained or rejected

    def done(self, pos: Pos) -> bool:
        """Has the trainer's final checkpoint moved past this record (trained or rejected)?"""
        at = self.positions.get((pos[0], pos[1]))
        return at is not None and pos[2] < at


@dataclass
class Ledger:
    raw_topic: str
    raw: dict[Pos, RawRecord] = field(default_factory=dict)
    lanes: list[LaneRecord] = field(default_factory=list)
    rejections: list[RejRecord] = field(default_factory=list)
    undecodable_rejections: int = 0
    lineage: list[dict] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    versions: list[int] = field(default_factory=list)  # the model's WeightVersion.version, in log order
    weights_undecodable: int = 0
    # committed offsets of the consumer groups reading raw / feedback (streams) and tasks (explorers):
    # a record at or past them was never read, so it is in flight, not lost
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)  # raw records (src) of live groups streams holds for feedback
    topic_counts: dict[str, int] = field(default_factory=dict)  # distinct record ids per topic key (as the sink counts)
    messages: dict[str, int] = field(default_factory=dict)  # messages per topic key


def _header(msg, name: str) -> str | None:
    for k, v in msg.headers() or []:
        if k == name:
            return v.decode(errors="replace") if v is not None else None
    return None


def committed(cfg: Config, group: str, topics: list[str]) -> dict[tuple[str, int], int]:
    md = make_admin(cfg).list_topics(timeout=10)
    tps = [TopicPartition(t, p) for t in topics if t in md.topics for p in md.topics[t].partitions]
    with CommittedOffsets(cfg) as read:  # a coordinator still moving after the run's stop answers NOT_COORDINATOR
        return retrying(lambda: read(group, tps, timeout=30), timeout_s=60)


def final_checkpoint(checkpoint_dir: Path) -> Checkpoint | None:
    from rftbus.trainer.checkpoint import Checkpoints

    if not checkpoint_dir.exists():
        return None
    latest = Checkpoints(checkpoint_dir, 0, 1).latest()
    if latest is None:
        return None
    _, m = latest
    positions = {}
    for rank in range(m.world):
        positions.update(m.positions_of(rank))
    return Checkpoint(m.step, m.version, positions)


def _kept_ids(g: ExperienceGroup) -> list[str]:
    """The survivors' ids; survivors that do not index the samples (a hostile record, which the trainer rejects
    whole as `schema`) name none of them rather than stopping the summary (#36)."""
    n = len(g.samples)
    return [g.samples[i].experience_id for i in g.survivors if 0 <= i < n]


# What the analytics sink counts per topic key: distinct ids of records of the topic's own type (per
# experience on the experience topics: every sample on raw and expert, the survivors on a curated lane).
IDS_OF_RECORD: dict[type, Callable[[Any], list[str]]] = {
    Task: lambda r: [r.task_id], ExperienceGroup: lambda r: r.experience_ids(), Rejection: lambda r: [r.rejection_id],
    Feedback: lambda r: [r.feedback_id], WeightVersion: lambda r: [f"{r.model}:{r.version}"],
    TrainerMetric: lambda r: [r.metric_id], GateDecision: lambda r: [r.decision_id],
}


def ids_of(key: str) -> Callable[[Any], list[str]]:
    topic = registry.BY_KEY[key]
    return _kept_ids if topic.curated else IDS_OF_RECORD[registry.record_of(key)]


def held_live_groups(cfg: Config, timeout_s: float = 60.0) -> set[str]:
    """The raw records of live groups the streams hold for feedback right now, as they publish them."""
    from rftbus.streams.published import held_groups

    return held_groups(cfg, timeout_s)


def read_ledger(cfg: Config, progress=lambda s: None, timeout_s: float = 300.0,
                keys: tuple[str, ...] | None = None) -> Ledger:
    """`keys`: the topics to read (default all; the run's summary skips the ones it does not tally)."""
    from rftbus.trainer.checkpoint import read_lineage

    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer()
    t = cfg.topics
    led = Ledger(raw_topic=t.raw.name)
    avro = {tp.key for tp in registry.avro_topics()}  # (the spans topic holds OTLP: the streams' input, not tallied)
    for key, spec in t.all().items():
        if (keys is not None and key not in keys) or key not in avro:
            continue
        progress(f"reading {spec.name}")
        cls, ident = registry.record_of(key), ids_of(key)
        ids: set[str] = set()
        n = 0
        for msg in read_to_end(cfg, spec.name, timeout_s=timeout_s):
            n += 1
            try:
                rec = decode(msg.value(), None)
            except DecodeError:
                rec = None
            if isinstance(rec, cls):
                ids.update(ident(rec))
            _keep(led, cfg, key, msg, rec)
        led.messages[key] = n
        led.topic_counts[key] = len(ids)
    ckpt_dir = Path(cfg.trainer.checkpoint_dir or cfg.state_dir / "checkpoints")
    led.lineage = read_lineage(ckpt_dir / "lineage.jsonl")
    led.checkpoint = final_checkpoint(ckpt_dir)
    led.committed = {**committed(cfg, cfg.streams.app_id, [t.raw.name, t.feedback.name]),
                     **committed(cfg, cfg.explorer.group_id, [t.tasks.name])}
    led.held = held_live_groups(cfg, timeout_s)
    return led


def _keep(led: Ledger, cfg: Config, key: str, msg, rec) -> None:
    """What the tally needs from one message of topic `key`."""
    pos = (msg.topic(), msg.partition(), msg.offset())
    if key == "raw":
        led.raw[pos] = (RawRecord(rec.experience_ids(), rec.group_id, rec.explorer_id,
                                  max((s.model_version for s in rec.samples), default=-1),
                                  max((s.generation_ms or 0.0 for s in rec.samples), default=0.0),
                                  getattr(rec.source, "value", str(rec.source)))
                        if isinstance(rec, ExperienceGroup) else RawRecord(None))
    elif key in LANES:
        ids = None
        if isinstance(rec, ExperienceGroup):
            ids = rec.experience_ids() if key == "expert" else _kept_ids(rec)
        led.lanes.append(LaneRecord(pos, key, _header(msg, H_SRC), ids))
    elif key == "rejected":
        if not isinstance(rec, Rejection):
            led.undecodable_rejections += 1
            return
        if is_further_trainer_stage(rec.stage):
            return  # another lineage's trainer (run.trainers): its own consumer group, not these books
        src = ((rec.source_topic, rec.partition or 0, rec.offset)
               if rec.source_topic is not None and rec.offset is not None else None)
        led.rejections.append(RejRecord(rec.rejection_id, rec.covers(), rec.reason, rec.stage, src))
    elif key == "weights":
        if isinstance(rec, WeightVersion):
            if rec.model == cfg.model.name:
                led.versions.append(int(rec.version))
        else:
            led.weights_undecodable += 1
