"""rftbus/ground/kafka/in_flight.py: a sink waits for its own records, not for everything a shared producer holds (the
trainer's checkpoint waited for metrics and weight records to a frozen leader), and a failed delivery is raised
naming the record. Through the real trainer sinks (Rejector, WeightPublisher) over a producer whose partitions
answer or hang as the test says (the real broker's frozen leader: rftbus chaos --nodes 3, docs/RELIABILITY.md)."""

from __future__ import annotations

import time

import pytest

from rftbus.ground.kafka.in_flight import DeliveryError, InFlight
from rftbus.ground.schemas import Rejection, WeightVersion, make_codec
from rftbus.trainer.batch_source import Polled
from rftbus.trainer.publish import WeightPublisher
from rftbus.trainer.rejects import Rejector
from rftbus.ground.weights.store_transport import StoreTransport

CODEC = make_codec(None)


class Err:
    def __init__(self, text: str):
        self.text = text

    def str(self) -> str:
        return self.text


class Producer:
    """confluent-kafka's produce/poll/flush: records to a `frozen` topic are never acknowledged, to a `refused`
    topic fail, the rest are acknowledged at the next poll."""

    def __init__(self, frozen=(), refused=()):
        self.frozen, self.refused = set(frozen), set(refused)
        self.queued: list[tuple[str, object]] = []
        self.polls = 0

    def produce(self, topic, key=None, value=None, on_delivery=None, **_):
        self.queued.append((topic, on_delivery))

    def poll(self, timeout=0.0):
        self.polls += 1
        left = []
        for topic, cb in self.queued:
            if topic in self.frozen:
                left.append((topic, cb))
            elif cb is not None:
                cb(Err("Broker: Not enough in-sync replicas") if topic in self.refused else None, None)
        self.queued = left
        return 0

    def flush(self, timeout=0.0):
        self.poll()
        return len(self.queued)


def _polled(offset: int) -> Polled:
    return Polled(lane="curated", topic="curated", partition=0, offset=offset, key=b"k", raw=b"x", group=None)


def test_a_rejection_flush_waits_for_the_rejections_not_for_a_frozen_topic_beside_them():
    producer = Producer(frozen={"metrics"})
    rejector = Rejector(producer, CODEC.serializer(Rejection), "rejected")
    producer.produce("metrics", value=b"m", on_delivery=lambda e, m: None)  # the metrics sink's, on a frozen leader
    rejector(_polled(3), "malformed", "bad bytes", [])
    assert producer.flush(0) == 1  # the old flush: held by the frozen topic
    t = time.monotonic()
    rejector.flush(timeout=5.0)
    assert time.monotonic() - t < 1.0 and rejector.in_flight.outstanding == 0


def test_a_rejection_kafka_refused_or_never_acknowledged_stops_the_checkpoint_naming_it():
    producer = Producer(refused={"rejected"})
    rejector = Rejector(producer, CODEC.serializer(Rejection), "rejected")
    rejector(_polled(7), "stale", "too old", ["e1"])
    with pytest.raises(DeliveryError, match=r"rejection of curated\[0\]@7 \(stale\): Broker: Not enough in-sync"):
        rejector.flush(timeout=1.0)
    frozen = Producer(frozen={"rejected"})
    rejector = Rejector(frozen, CODEC.serializer(Rejection), "rejected")
    rejector(_polled(8), "stale", "too old", ["e2"])
    with pytest.raises(DeliveryError, match=r"1 rejection\(s\) not acknowledged by the broker within 0.3 s"):
        rejector.flush(timeout=0.3)


def test_publish_does_not_wait_for_the_weights_leader_and_a_lost_version_stops_the_next_publish(tmp_path):
    producer = Producer(frozen={"weights"})
    pub = WeightPublisher(StoreTransport(None, str(tmp_path / "store")), "m", producer, CODEC.serializer(WeightVersion), "weights", eta=1,
                          keep=4, grace_s=0.0)
    sd = {"w": __import__("torch").zeros(2)}
    t = time.monotonic()
    pub.publish(sd, 1, 1)
    pub.publish(sd, 2, 2)
    assert time.monotonic() - t < 5.0 and pub.in_flight.outstanding == 2  # both on their way, neither waited for
    with pytest.raises(DeliveryError, match=r"2 weight version\(s\) not acknowledged"):
        pub.wait(0.2)
    producer.frozen.clear()
    pub.wait(1.0)  # the leader moved: both acknowledged
    producer.refused.add("weights")
    pub.publish(sd, 3, 3)
    producer.poll()
    with pytest.raises(DeliveryError, match=r"weight version v3: Broker: Not enough in-sync replicas"):
        pub.publish(sd, 4, 4)


def test_in_flight_counts_only_its_own_records():
    inf = InFlight("thing")
    cb = inf.expect("a")
    assert inf.outstanding == 1
    cb(None, None)
    assert inf.outstanding == 0 and not inf.failed
    inf.wait(Producer(), 0.1)
