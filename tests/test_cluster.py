"""The three-node cluster (#22): kill -9 the leader of a partition while a producer (acks=all, idempotent)
and a consumer run; every acknowledged record is read, once, and the producer goes on through the failover.
Then the node comes back and the partition's ISR is whole again."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from rftbus.broker import embedded
from rftbus.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.kafka.inspect import partition_layout


def test_cluster_layout(cluster):
    assert cluster.replicas == 3 and len(cluster.bootstrap_servers.split(",")) == 3
    assert all(p is not None for p in embedded.running_pids(cluster).values())
    raw = cluster.declared_topics()["raw"]
    assert raw.replication_factor == 3 and raw.config["min.insync.replicas"] == "2"


def test_leader_kill_loses_nothing_acknowledged(cluster):
    topic = f"failover-{uuid.uuid4().hex[:6]}"
    admin = make_admin(cluster)
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    acked: list[int] = []
    failed: list[str] = []
    ack_times: list[float] = []
    stop = threading.Event()

    def produce() -> None:
        p = make_producer(cluster, **{"linger.ms": 5, "message.timeout.ms": 60000})
        i = 0

        def done(err, msg) -> None:
            if err is None:
                acked.append(int(msg.value()))
                ack_times.append(time.monotonic())
            else:
                failed.append(err.str())
        while not stop.is_set():
            p.produce(topic, value=str(i).encode(), on_delivery=done)
            i += 1
            p.poll(0.005)
        assert p.flush(90) == 0

    consumed: list[int] = []

    def consume() -> None:
        c = make_consumer(cluster, f"g-{topic}", **{"auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, 0, 0)])
        idle = 0.0
        while not (stop.is_set() and idle > 5):
            m = c.poll(0.5)
            if m is None or m.error():
                idle += 0.5
                continue
            idle = 0.0
            consumed.append(int(m.value()))
        c.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        leader = partition_layout(admin)[topic][0][0]
        before = len(acked)
        assert before > 0, "nothing acknowledged before the kill"
        killed_at = time.monotonic()
        embedded.kill_node(cluster, leader)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(acked) < before + 200:
            time.sleep(0.2)
        assert len(acked) >= before + 200, f"the producer did not go on after node {leader} was killed ({failed[:3]})"
        stall = next(t for t in ack_times if t > killed_at) - killed_at
        new_leader = partition_layout(admin)[topic][0][0]
        assert new_leader not in (leader, -1)
        embedded.start_node(cluster, leader)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(partition_layout(admin)[topic][0][2]) < 3:
            time.sleep(0.5)
        assert len(partition_layout(admin)[topic][0][2]) == 3, "the ISR is not whole again after the restart"
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not failed, failed[:5]
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} acknowledged records not read after the failover"
    assert len(consumed) == len(set(consumed)), "a record was read twice (the producer is idempotent)"
    print(f"failover: leader {leader} -> {new_leader}, first ack after the kill {stall:.2f} s, {len(acked)} acked")
