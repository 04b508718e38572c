"""Trainer metrics to `rft.metrics` (TrainerMetric records) and TensorBoard (<state_dir>/tensorboard)."""

from __future__ import annotations

import math
from pathlib import Path

from rftbus.ground.schemas import TrainerMetric, now_ms, topic_context


class MetricsSink:
    def __init__(self, producer, serializer, topic: str, model: str, tb_dir: Path | None):
        self.producer, self.serialize, self.topic, self.model = producer, serializer, topic, model
        self.tb = None
        if tb_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(tb_dir))

    def emit(self, step: int, version: int, values: dict[str, float], kind: str = "metric") -> TrainerMetric:
        clean = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        rec = TrainerMetric(model=self.model, kind=kind, step=step, version=version, values=clean)
        if self.producer is not None:
            self.producer.produce(self.topic, key=self.model.encode(), value=self.serialize(rec, topic_context(self.topic)))
            self.producer.poll(0)
        if self.tb is not None:
            for k, v in clean.items():
                self.tb.add_scalar(f"{kind}/{k}", v, step)
            self.tb.flush()
        return rec

    def emit_trained(self, segment: list[dict]) -> list[TrainerMetric]:
        """Publish a durable checkpoint's lineage: one kind="trained" record per (step, rank) line,
        values = {experience_id: staleness}, created_at = the step's time. Called after the checkpoint
        is durable, so the analytics sink's `trained` table holds exactly the model's lineage."""
        out = []
        for line in segment:
            stale = line.get("staleness") or [0] * len(line["experience_ids"])
            rec = TrainerMetric(model=self.model, kind="trained", step=line["step"], version=line["version"],
                                values={e: float(s) for e, s in zip(line["experience_ids"], stale)},
                                created_at=line.get("time_ms") or now_ms())
            if self.producer is not None:
                self.producer.produce(self.topic, key=self.model.encode(), value=self.serialize(rec, topic_context(self.topic)))
                self.producer.poll(0)
            out.append(rec)
        return out

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
