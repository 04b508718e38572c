"""What a run did, from the log itself: counts per topic, rejections by reason, the trainer's lineage.

Reconciliation: every experience produced to the raw topic is trained (it is in the lineage), rejected
(it is on the rejected topic) or still in flight when the job stopped; none is both trained and rejected.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rftbus.config import Config
from rftbus.kafka.read import read_to_end
from rftbus.schemas import DecodeError, ExperienceGroup, Rejection, make_codec
from rftbus.trainer.checkpoint import read_lineage


@dataclass
class Reconciliation:
    produced: int = 0
    trained: int = 0
    rejected: int = 0
    in_flight: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    tasks_rejected_by_reason: dict[str, int] = field(default_factory=dict)  # explorer: task failed, no experience
    trained_twice: int = 0
    trained_and_rejected: int = 0
    trainer_steps: int = 0
    max_staleness_trained: int = 0
    expert_trained: int = 0
    explorer_versions: list[int] = field(default_factory=list)  # weight versions experiences were made with

    @property
    def ok(self) -> bool:
        return (self.in_flight >= 0 and self.trained_twice == 0 and self.trained_and_rejected == 0
                and self.produced == self.trained + self.rejected + self.in_flight)


def reconcile(cfg: Config, lineage_path: Path) -> Reconciliation:
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    dec_group, dec_rej = codec.deserializer(ExperienceGroup), codec.deserializer(Rejection)
    produced: set[str] = set()
    versions: set[int] = set()
    for msg in read_to_end(cfg, cfg.topics.raw.name):
        try:
            group = dec_group(msg.value(), None)
        except DecodeError:
            continue  # malformed raw bytes are not produced experiences; streams reject them
        if group is None:
            continue  # a tombstone (the codec passes null values through): not an experience either
        for e in group.samples:
            produced.add(e.experience_id)
            versions.add(e.model_version)
    reasons: Counter[str] = Counter()
    task_reasons: Counter[str] = Counter()
    rejected: set[str] = set()
    for msg in read_to_end(cfg, cfg.topics.rejected.name):
        try:
            rej = dec_rej(msg.value(), None)
        except DecodeError:
            continue
        if rej is None:
            continue
        if rej.source_topic == cfg.topics.tasks.name:
            task_reasons[rej.reason] += 1
            continue
        for eid in rej.covers():
            if eid in produced and eid not in rejected:
                rejected.add(eid)
                reasons[rej.reason] += 1
    lineage = read_lineage(lineage_path)
    trained_list = [eid for seg in lineage for eid in seg["experience_ids"] if eid in produced]
    trained = set(trained_list)
    r = Reconciliation(
        produced=len(produced), trained=len(trained), rejected=len(rejected - trained),
        rejected_by_reason=dict(reasons), tasks_rejected_by_reason=dict(task_reasons), trained_twice=len(trained_list) - len(trained),
        trained_and_rejected=len(trained & rejected),
        trainer_steps=max((seg["step"] for seg in lineage), default=0),
        max_staleness_trained=max((seg.get("staleness_max", 0) for seg in lineage), default=0),
        expert_trained=sum(1 for seg in lineage for eid in seg["experience_ids"] if eid not in produced),
        explorer_versions=sorted(versions),
    )
    r.in_flight = r.produced - r.trained - r.rejected
    return r
