"""The embedded broker is a real Apache Kafka process; up/down keep every record; failures read clearly."""

from __future__ import annotations

import json
import socket
import stat
import uuid

import psutil
from confluent_kafka import TopicPartition

from rftbus.ground.broker import embedded
from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.ground.kafka.topics import create_topics
from tests.conftest import _free_pair, make_config, rftbus_cli


def _no_traceback(out) -> None:
    assert "Traceback" not in out.stderr + out.stdout, out.stderr


def test_broker_is_a_real_kafka_java_process(broker):
    pid = embedded.running_pid(broker)
    assert pid is not None
    proc = psutil.Process(pid)
    cmdline = proc.cmdline()
    assert proc.name() == "java"
    assert "kafka.Kafka" in cmdline
    classpath = cmdline[cmdline.index("-cp") + 1]
    jars = {p.name for p in (embedded.Path(classpath.rstrip("/*"))).glob("kafka*.jar")}
    assert f"kafka_2.13-{broker.broker.kafka_version}.jar" in jars
    listening = {c.laddr.port for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    assert {broker.broker.port, broker.broker.controller} <= listening


def test_up_twice_says_already_running(broker):
    out = rftbus_cli(broker, "up")
    assert out.returncode == 0, out.stderr
    assert "already running" in out.stderr
    assert out.stdout.strip() == broker.broker.bootstrap


def test_topics_create_is_idempotent_and_reports_drift(broker):
    first = rftbus_cli(broker, "topics", "create")
    assert first.returncode == 0, first.stderr
    second = rftbus_cli(broker, "topics", "create")
    assert second.returncode == 0, second.stderr
    assert "created" not in second.stdout
    assert second.stdout.count("exists") == len(broker.topics.all())
    drift = rftbus_cli(broker, "topics", "create", env={"RFTBUS_TOPICS__METRICS__PARTITIONS": "3",
                                                          "RFTBUS_TOPICS__TASKS__RETENTION_MS": "1000"})
    assert drift.returncode == 0, drift.stderr
    assert "differs  rft.metrics" in drift.stdout
    assert "partitions: declared 3, actual 1" in drift.stdout
    assert "retention.ms: declared 1000, actual -1" in drift.stdout

    status = rftbus_cli(broker, "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    topics = {t["name"]: t for t in report["topics"]}
    assert topics["rft.weights"]["cleanup_policy"] == "compact"
    assert topics["rft.experiences.raw"]["partitions"] == 4
    assert report["embedded_pid"] == embedded.running_pid(broker)


def test_status_shows_consumer_group_lag(broker):
    create_topics(broker, make_admin(broker))
    topic = broker.topics.metrics.name
    producer = make_producer(broker)
    for i in range(7):
        producer.produce(topic, value=f"m{i}".encode())
    producer.flush(30)
    group = f"lag-{uuid.uuid4().hex[:6]}"
    consumer = make_consumer(broker, group)
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = [m for m in (consumer.poll(10) for _ in range(3)) if m is not None and not m.error()]
    assert got
    consumer.commit(message=got[0], asynchronous=False)
    consumer.close()
    report = json.loads(rftbus_cli(broker, "status", "--json").stdout)
    lag = {g["group_id"]: g for g in report["groups"]}[group]
    assert lag["lag"] > 0
    assert lag["partitions"][f"{topic}[0]"] == lag["lag"]


def test_down_up_keeps_every_record(broker):
    topic = broker.topics.tasks.name
    create_topics(broker, make_admin(broker))
    payloads = [uuid.uuid4().hex.encode() for _ in range(50)]
    producer = make_producer(broker)
    for i, p in enumerate(payloads):
        producer.produce(topic, key=str(i).encode(), value=p)
    assert producer.flush(30) == 0
    old_pid = embedded.running_pid(broker)

    down = rftbus_cli(broker, "down")
    assert down.returncode == 0, down.stderr
    assert embedded.running_pid(broker) is None
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
    up = rftbus_cli(broker, "up")
    assert up.returncode == 0, up.stderr
    assert embedded.running_pid(broker) not in (None, old_pid)

    consumer = make_consumer(broker, f"restart-{uuid.uuid4().hex[:6]}")
    md = make_admin(broker).list_topics(topic=topic, timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in md.topics[topic].partitions])
    seen = set()
    for _ in range(60):
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error():
            seen.add(msg.value())
        if set(payloads) <= seen:
            break
    consumer.close()
    assert set(payloads) <= seen


def test_port_in_use_is_a_clear_error(tmp_path):
    port = _free_pair()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        out = rftbus_cli(make_config(tmp_path, port), "up")
    _no_traceback(out)
    assert out.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in out.stderr


def test_missing_jdk_is_a_clear_error(tmp_path):
    out = rftbus_cli(make_config(tmp_path, _free_pair()), "up", env={"PATH": str(tmp_path / "nowhere"), "JAVA_HOME": ""})
    _no_traceback(out)
    assert out.returncode == 1
    assert "needs a JDK 17+" in out.stderr


def test_old_jdk_is_a_clear_error(tmp_path):
    home = tmp_path / "jdk11"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    # A stand-in `java` that only prints what a JDK 11 prints for -version: this tests version parsing.
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.21" 2023-10-17\' >&2\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    out = rftbus_cli(make_config(tmp_path, _free_pair()), "up", env={"JAVA_HOME": str(home)})
    _no_traceback(out)
    assert out.returncode == 1
    assert "needs Java 17+" in out.stderr and "Java 11.0.21" in out.stderr


def test_unreachable_broker_is_a_clear_error():
    for args in (["status"], ["topics", "create"], ["tail", "rft.tasks", "--from-beginning"]):
        out = rftbus_cli(None, "-b", "127.0.0.1:1", *args)
        _no_traceback(out)
        assert out.returncode == 1, args
        assert "not reachable" in out.stdout + out.stderr, args


def test_corrupt_state_folder_is_a_clear_error(tmp_path):
    cfg = make_config(tmp_path, _free_pair())
    data = tmp_path / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "rft.tasks-0").mkdir()
    out = rftbus_cli(cfg, "up")
    _no_traceback(out)
    assert out.returncode == 1 and "is corrupt" in out.stderr and "no meta.properties" in out.stderr

    (data / "meta.properties").write_bytes(b"\x00\xffnot properties at all")
    out = rftbus_cli(cfg, "up")
    _no_traceback(out)
    assert out.returncode == 1 and "is corrupt" in out.stderr


def test_cluster_ids_never_start_with_a_dash(monkeypatch):
    """kafka-storage reads "-x..." as an option: 1 format in 64 failed before ids were redrawn."""
    draws = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x08" + bytes(15))])  # "-A...", "CA..."
    monkeypatch.setattr(embedded.uuid, "uuid4", lambda: next(draws))
    cid = embedded._new_cluster_id()
    assert not cid.startswith("-") and len(cid) == 22 and cid.startswith("CA")
