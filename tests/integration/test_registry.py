"""The codec's Confluent-framing path against a real Schema Registry (Apicurio Registry from Maven Central,
its Confluent-compatible API): every record type through the session broker, a compatible evolution
accepted, an incompatible one refused by the registry."""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import REPO
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from rftbus.ground.broker.registry import start_registry
from rftbus.apps.chaos.plan import free_port_pair
from test_bus import test_every_record_type_round_trips_through_kafka as round_trip_through_kafka

HISTORY = REPO / "rftbus" / "ground" / "schemas" / "history" / "Experience"


@pytest.fixture(scope="module")
def apicurio():
    home = REPO / ".rftbus" / "registry"  # the distribution is cached here, as the broker's jars are
    home.mkdir(parents=True, exist_ok=True)
    reg = start_registry(home, free_port_pair("127.0.0.1", 1))
    yield reg
    reg.stop()


def test_every_record_type_through_kafka_with_a_real_registry(broker, apicurio):
    round_trip_through_kafka(broker, apicurio.url)
    subjects = SchemaRegistryClient({"url": apicurio.url}).get_subjects()
    names = {"Task", "ExperienceGroup", "Feedback", "WeightVersion", "TrainerMetric", "Rejection"}
    assert {n for n in names if any(f"rftbus.{n}-" in s for s in subjects)} == names, subjects


def test_the_registry_accepts_a_compatible_change_and_refuses_an_incompatible_one(apicurio):
    client = SchemaRegistryClient({"url": apicurio.url})
    subject = f"evolve-{uuid.uuid4().hex[:6]}-value"
    client.set_compatibility(subject, "BACKWARD")
    v1, v2 = ((HISTORY / f"v{i}.avsc").read_text() for i in (1, 2))
    first = client.register_schema(subject, Schema(v1, "AVRO"))
    second = client.register_schema(subject, Schema(v2, "AVRO"))  # v2 adds fields with defaults
    assert first != second and len(client.get_versions(subject)) == 2
    bad = json.loads(v2)
    bad["fields"].append({"name": "required_without_default", "type": "long"})
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(json.dumps(bad), "AVRO"))
    assert refused.value.http_status_code == 409, refused.value
    assert len(client.get_versions(subject)) == 2
