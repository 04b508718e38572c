"""Every record type round-trips through the real broker with the project's codec; `rftbus tail`."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from rftbus.apps.bus_check import round_trip, sample_records
from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.ground.kafka.topics import create_new, create_topics
from rftbus.ground.schemas import make_codec
from tests.conftest import rftbus_cli


def _consume_at(cfg, topic: str, partition: int, offset: int):
    consumer = make_consumer(cfg, f"t-{uuid.uuid4().hex[:6]}")
    consumer.assign([TopicPartition(topic, partition, offset)])
    try:
        for _ in range(40):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                return msg
    finally:
        consumer.close()
    raise AssertionError(f"nothing at {topic}[{partition}]@{offset}")


@pytest.mark.parametrize("registry", [None, "mock://bus-test"], ids=["single-object", "confluent-registry"])
def test_every_record_type_round_trips_through_kafka(broker, registry):
    create_topics(broker, make_admin(broker))
    codec = make_codec(registry)
    producer = make_producer(broker)
    topics = broker.topics.all()
    records = sample_records()
    sent = {}
    for key, record in records.items():
        value = codec.encode(record, None)
        assert value[:2] == b"\xc3\x01" if registry is None else value[0] == 0
        producer.produce(topics[key].name, key=record.kafka_key() and record.kafka_key().encode(), value=value,
                         on_delivery=lambda err, msg, k=key: sent.__setitem__(k, (err, msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    decode = codec.deserializer()
    for key, (err, partition, offset) in sent.items():
        assert err is None
        back = decode(_consume_at(broker, topics[key].name, partition, offset).value(), None)
        assert back == records[key], key
        assert type(back) is type(records[key])


def test_bus_check_compares_whole_records(broker):
    create_topics(broker, make_admin(broker))
    results = round_trip(broker)
    assert {r.record_type for r in results} == {
        "rftbus.Task", "rftbus.ExperienceGroup", "rftbus.Feedback", "rftbus.WeightVersion", "rftbus.TrainerMetric",
        "rftbus.Rejection", "rftbus.GateDecision"}
    assert all(r.equal for r in results)


def test_tail_prints_garbage_as_undecodable_and_carries_on(broker):
    create_topics(broker, make_admin(broker))
    topic = f"tail-{uuid.uuid4().hex[:6]}"
    admin = make_admin(broker)
    create_new(admin, [NewTopic(topic, 1, 1)])
    codec = make_codec(None)
    recs = sample_records()
    producer = make_producer(broker)
    producer.produce(topic, value=codec.encode(recs["tasks"], None))
    producer.produce(topic, value=b"\x00\x00\x00\x00\x07garbage")  # Confluent-looking, no registry
    producer.produce(topic, value=b"\xc3\x01" + b"\x11" * 8 + b"body")  # unknown fingerprint
    producer.produce(topic, value=b"hello, not avro")
    producer.produce(topic, value=codec.encode(recs["raw"], None))
    assert producer.flush(30) == 0

    out = rftbus_cli(broker, "tail", topic, "--from-beginning")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 5, out.stdout
    assert "rftbus.Task" in lines[0] and "bus-check" in lines[0]
    assert "UNDECODABLE" in lines[1] and "no_registry" in lines[1]
    assert "UNDECODABLE" in lines[2] and "unknown_schema" in lines[2]
    assert "UNDECODABLE" in lines[3] and "unknown_magic" in lines[3]
    assert "rftbus.ExperienceGroup" in lines[4]

    js = rftbus_cli(broker, "tail", topic, "--from-beginning", "--json", "--limit", "4")
    rows = [json.loads(x) for x in js.stdout.strip().splitlines()]
    assert len(rows) == 4
    assert rows[0]["type"] == "rftbus.Task" and rows[0]["value"]["prompt"] == recs["tasks"].prompt
    assert [r.get("undecodable", False) for r in rows] == [False, True, True, True]
    assert rows[3]["hex"] == b"hello, not avro".hex()


def test_tail_unknown_topic_is_a_clear_error(broker):
    out = rftbus_cli(broker, "tail", "no.such.topic", "--from-beginning")
    assert out.returncode == 1
    assert "topic 'no.such.topic' does not exist" in out.stderr
    assert "Traceback" not in out.stderr
