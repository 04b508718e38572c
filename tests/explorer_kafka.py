"""Helpers for the explorer/taskset tests: per-test topics and reading a topic back."""

from __future__ import annotations

import uuid

from confluent_kafka import TopicPartition

from rftbus.ground.kafka.clients import make_admin, make_consumer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import make_codec

KEYS = ("tasks", "raw", "curated", "curated_priority", "expert", "rejected", "weights")


def fresh_config(make_config, tmp_path, broker, **overrides):
    """A Config with unique topic names and group ids on the session broker; topics created."""
    u = uuid.uuid4().hex[:8]
    names = {f"topics.{k}.name": f"{k}-{u}" for k in KEYS}
    cfg = make_config(tmp_path, broker.broker.port, **names, **{
        "explorer.group_id": f"explorers-{u}", "streams.app_id": f"streams-{u}", "trainer.group_id": f"trainer-{u}",
        "rl.group_size": 2, "explorer.sampling.seed": 0, **overrides})
    create_topics(cfg, make_admin(cfg))
    return cfg


def read_topic(cfg, key: str, timeout: float = 10.0):
    """Every (key, record) in a topic, decoded, in partition/offset order."""
    decode = make_codec(None).deserializer()
    return [(m.key().decode() if m.key() else None, decode(m.value(), None))
            for m in read_to_end(cfg, cfg.topics.all()[key].name, timeout_s=timeout, strict=False)]


def committed(cfg, group: str, key: str) -> dict[int, int]:
    name = cfg.topics.all()[key].name
    consumer = make_consumer(cfg, group)
    md = consumer.list_topics(name, timeout=10).topics[name]
    got = consumer.committed([TopicPartition(name, p) for p in md.partitions], timeout=10)
    consumer.close()
    return {tp.partition: tp.offset for tp in got}


def end_offsets(cfg, key: str) -> dict[int, int]:
    name = cfg.topics.all()[key].name
    consumer = make_consumer(cfg, "offsets-reader")
    md = consumer.list_topics(name, timeout=10).topics[name]
    out = {p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1] for p in md.partitions}
    consumer.close()
    return out
