"""A round trip of every record type through the bus: what `rftbus check` runs.

Each record is encoded with the project's codec, produced idempotently (acks=all) to the topic it
belongs on, read back by offset and decoded; the check passes only if every record comes back equal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import TopicPartition

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer, make_producer
from rftbus.ground.schemas import (
    AvroRecord, Experience, ExperienceGroup, Feedback, FeedbackKind, GateDecision, Rejection, Task, TrainerMetric, WeightVersion,
    make_codec, topic_context,
)


def sample_records() -> dict[str, AvroRecord]:
    """One realistic record per type, keyed by the config's topic key it is published to."""
    task = Task(taskset="bus-check", prompt="12+30=", answer="42")
    exp = Experience(response_ids=[11, 12, 2], logprobs=[-0.5, -0.25, -0.125], loss_mask=[True, True, True],
                     reward=1.0, reward_components={"correct": 1.0}, model_version=0, response_text="42")
    group = ExperienceGroup(group_id=f"{task.task_id}:0", task_id=task.task_id, explorer_id="bus-check",
                            prompt_ids=[5, 6, 7, 8, 9, 10], prompt_text="12+30=", samples=[exp])
    return {
        "tasks": task,
        "raw": group,
        "feedback": Feedback(experience_id=exp.experience_id, kind=FeedbackKind.thumbs, thumbs_up=True),
        "weights": WeightVersion(model="bus-check", version=0, step=0, uri="file:///dev/null", sha256="0" * 64, bytes=0),
        "metrics": TrainerMetric(model="bus-check", kind="progress", step=0, version=0, values={"loss": 0.0}),
        "rejected": Rejection(experience_id=exp.experience_id, group_id=group.group_id,
                              experience_ids=[exp.experience_id], reason="bus_check", stage="check"),
        "decisions": GateDecision(decision_id="bus-check:1:canary", model="bus-check", decision="canary", version=1,
                                  serving=0, candidate=1, canary_share=0.2, gate="bus-check", reason="bus check",
                                  evidence={"n_candidate": 0.0}),
    }


@dataclass
class CheckResult:
    topic: str
    record_type: str
    partition: int
    offset: int
    equal: bool


def round_trip(cfg: Config, timeout: float = 30.0) -> list[CheckResult]:
    codec = make_codec(cfg.schema_registry.url, cfg.schema_registry.client)
    producer = make_producer(cfg)
    delivered: dict[str, tuple[int, int]] = {}
    records = sample_records()
    topics = cfg.topics.all()

    def on_delivery(key: str):
        def cb(err, msg):
            if err is None:
                delivered[key] = (msg.partition(), msg.offset())
            else:
                raise RuntimeError(f"delivery to {msg.topic()} failed: {err.str()}")
        return cb

    for key, record in records.items():
        value = codec.serializer(type(record))(record, topic_context(topics[key].name))
        rkey = record.kafka_key()
        producer.produce(topics[key].name, key=rkey.encode() if rkey else None, value=value, on_delivery=on_delivery(key))
    if producer.flush(timeout) != 0 or len(delivered) != len(records):
        raise RuntimeError("not every record was acknowledged by the broker")

    consumer = make_consumer(cfg, "rftbus-bus-check")
    results = []
    try:
        deserializer = codec.deserializer()
        for key, record in records.items():
            partition, offset = delivered[key]
            consumer.assign([TopicPartition(topics[key].name, partition, offset)])
            deadline = time.monotonic() + timeout
            msg = None
            while msg is None and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is not None and not m.error():
                    msg = m
            back = deserializer(msg.value(), None) if msg is not None else None
            results.append(CheckResult(topics[key].name, record.SCHEMA_NAME, partition, offset, back == record))
    finally:
        consumer.close()
    return results
