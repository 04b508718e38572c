"""The three-node cluster (#22): kill -9 the leader of a partition while a producer (acks=all, idempotent)
and a consumer run; every acknowledged record is read, once, and the producer goes on through the failover.
Then the node comes back and the partition's ISR is whole again."""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from rftbus.ground.broker import embedded
from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.ground.kafka.inspect import partition_layout
from rftbus.ground.kafka.topics import create_new


def layout(admin, topic: str) -> tuple[int, list[int], list[int]]:
    """Partition 0's (leader, replicas, ISR). Each metadata read may go to a different broker, and one whose
    cache does not show a just-created topic yet is asked again."""
    deadline = time.monotonic() + 15
    while (found := partition_layout(admin).get(topic)) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert found is not None, f"topic {topic} not in the cluster metadata"
    return found[0]


def test_cluster_layout(cluster):
    assert cluster.replicas == 3 and len(cluster.bootstrap_servers.split(",")) == 3
    assert all(p is not None for p in embedded.running_pids(cluster).values())
    raw = cluster.declared_topics()["raw"]
    assert raw.replication_factor == 3 and raw.config["min.insync.replicas"] == "2"


def test_leader_kill_loses_nothing_acknowledged(cluster):
    topic = f"failover-{uuid.uuid4().hex[:6]}"
    admin = make_admin(cluster)
    create_new(admin, [NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])
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
        deadline = time.monotonic() + 60
        while len(acked) < 200 and time.monotonic() < deadline:  # steady writes under way
            time.sleep(0.1)
        leader = layout(admin, topic)[0]
        before = len(acked)
        assert before > 0, "nothing acknowledged before the kill"
        killed_at = time.monotonic()
        embedded.kill_node(cluster, leader)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(acked) < before + 200:
            time.sleep(0.2)
        assert len(acked) >= before + 200, f"the producer did not go on after node {leader} was killed ({failed[:3]})"
        stall = next(t for t in ack_times if t > killed_at) - killed_at
        new_leader = layout(admin, topic)[0]
        assert new_leader not in (leader, -1)
        embedded.start_node(cluster, leader)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(layout(admin, topic)[2]) < 3:
            time.sleep(0.5)
        assert len(layout(admin, topic)[2]) == 3, "the ISR is not whole again after the restart"
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not failed, failed[:5]
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} acknowledged records not read after the failover"
    assert len(consumed) == len(set(consumed)), "a record was read twice (the producer is idempotent)"
    print(f"failover: leader {leader} -> {new_leader}, first ack after the kill {stall:.2f} s, {len(acked)} acked")


def test_recovery_scan_sees_writes_not_yet_replicated(cluster):
    """A dead worker's last output, appended by the leader but not yet on the in-sync followers, sits above
    the high watermark: a plain scan misses it (the successor would do the work again: a duplicate), the
    fenced scan waits for it. One follower is stopped (SIGSTOP) to hold the window open: the high watermark
waits for every replica in the ISR, and the stopped one stays there for replica.lag.time.max.ms (5 s)."""
    import os
    import signal

    from rftbus.streams.outputs import H_IN, H_K, H_N, H_SRC
    from rftbus.streams.checkpoint.landed import scan

    topic = f"fence-{uuid.uuid4().hex[:6]}"
    admin = make_admin(cluster)
    create_new(admin, [NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])
    # the topic's replicas start in the ISR only once they fetched: wait for all three
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(layout(admin, topic)[2]) < 3:
        time.sleep(0.2)
    leader, replicas, _ = layout(admin, topic)
    followers = [embedded.running_pid(cluster, n) for n in replicas if n != leader][:1]
    out = [(topic, 0)]
    headers = [(H_IN, b"0"), (H_SRC, b"raw/0/7"), (H_N, b"1"), (H_K, b"0")]
    p = make_producer(cluster, **{"acks": "1", "enable.idempotence": False})
    # the producer learns the leader first: a metadata request sent to the stopped follower would hang the flush
    p.list_topics(topic, timeout=10)
    since = int(time.time() * 1000) - 1000
    for pid in followers:
        os.kill(pid, signal.SIGSTOP)
    try:
        p.produce(topic, b"out", key=b"g-7", partition=0, headers=headers)
        assert p.flush(10) == 0  # on the leader's log, not yet replicated
        plain = scan(cluster.model_copy(update={"streams": cluster.streams.model_copy(
            update={"recovery_fence": False})}), out, 0, since)
        assert "raw/0/7" not in plain.done, "the window did not open (the write was already visible)"
        resume = threading.Timer(1.5, lambda: [os.kill(pid, signal.SIGCONT) for pid in followers])
        resume.start()
        t = time.monotonic()
        fenced = scan(cluster, out, 0, since)
        waited = time.monotonic() - t
        resume.join()
    finally:
        for pid in followers:
            os.kill(pid, signal.SIGCONT)
    assert "raw/0/7" in fenced.done, "the fenced scan missed a write the leader had appended before it"
    assert waited >= 1.0, f"the fence returned in {waited:.2f} s, before the followers had the write"
    # the fence itself is invisible to every reader (read_committed): the scan read one record
    assert fenced.scanned == 1
    print(f"fenced scan waited {waited:.2f} s for the followers")


def test_frozen_coordinator_costs_what_a_kill_costs(cluster):
    """#37: a node frozen (SIGSTOP) while it coordinates the trainer's group and leads the weights partition
    keeps its TCP connections open, so a client waits for its answer until the request times out; librdkafka's
    default is 60 s. rftbus bounds every request (`kafka.request_timeout_s`), so the offset commit and the
    acks=all publish of the trainer's step move to the new coordinator and leader within that bound."""
    import os
    import signal

    from rftbus.ground.kafka.retry import retry_kafka

    topic, group = f"frozen-{uuid.uuid4().hex[:6]}", f"g-frozen-{uuid.uuid4().hex[:6]}"
    admin = make_admin(cluster)
    c = make_consumer(cluster, group)
    try:
        create_new(admin, [NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])
        layout(admin, topic)
        retry_kafka(lambda: c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False),
                    "the first commit")  # the group now has a coordinator
        coordinator = admin.describe_consumer_groups([group])[group].result(15).coordinator.id
        # a topic led by the same node (its first replica is the preferred leader)
        others = [n for n in cluster.broker.node_ids if n != coordinator]
        led = f"{topic}-led"
        create_new(admin, [NewTopic(led, 1, replication_factor=-1, replica_assignment=[[coordinator, *others]],
                                    config={"min.insync.replicas": "2"})])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(layout(admin, led)[2]) < 3:
            time.sleep(0.2)
        assert layout(admin, led)[0] == coordinator
        p = make_producer(cluster)
        p.produce(led, b"before")
        assert p.flush(15) == 0
        pid = embedded.running_pid(cluster, coordinator)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            t = time.monotonic()
            retry_kafka(lambda: c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False),
                        "committing on a frozen coordinator", timeout_s=120)
            commit_s = time.monotonic() - t
            errors: list[str] = []
            t = time.monotonic()
            p.produce(led, b"during", on_delivery=lambda err, _m: errors.append(err.str()) if err else None)
            left = p.flush(120)
            publish_s = time.monotonic() - t
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        c.close()
    assert left == 0 and not errors, errors
    # one request's timeout, at most two retries that still reach the frozen node (a client's coordinator lookup and
    # metadata can lag the controller's fencing: CI once saw the commit time out, its reconnect's ApiVersion time out,
    # then one more request: 30.8 s), then the new coordinator / leader; librdkafka's defaults took 70 s
    bound = 3 * cluster.request_timeout_s + 10
    assert commit_s < bound and publish_s < bound, (commit_s, publish_s)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(layout(admin, led)[2]) < 3:
        time.sleep(0.5)
    assert len(layout(admin, led)[2]) == 3, "the frozen node did not rejoin the ISR after SIGCONT"
    print(f"frozen coordinator: commit {commit_s:.1f} s, acks=all write {publish_s:.1f} s (bound {bound:g} s)")
