"""Creating the declared topics idempotently and reporting drift from the declaration."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from rftbus.ground.config import Config, TopicSpec
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.retry import retriable, retrying


@dataclass
class TopicResult:
    key: str
    name: str
    status: str  # "created" | "exists" | "differs" | "error"
    differences: list[str] = field(default_factory=list)
    error: str | None = None


def describe_topic_configs(admin: AdminClient, names: list[str], timeout: float = 15.0) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]

    def describe() -> dict[str, dict[str, str]]:
        futures = admin.describe_configs(resources, request_timeout=timeout)
        return {res.name: {k: v.value for k, v in fut.result(timeout=timeout).items() if v.value is not None}
                for res, fut in futures.items()}

    # A cluster starting or failing over, or a node whose cache does not show a topic the caller saw in metadata
    # yet (UNKNOWN_TOPIC_OR_PART; a streams worker crashed at start on it, #37): asked again until the deadline.
    return retrying(describe, timeout, also=(KafkaError.UNKNOWN_TOPIC_OR_PART,), pause_s=0.2)


def max_message_bytes(admin: AdminClient, names: list[str], timeout: float = 15.0) -> dict[str, int]:
    """Each topic's `max.message.bytes` (the broker's default when the topic sets none): the largest
    record batch the broker accepts there. A record over it fails at the broker, so writers size to it."""
    out = {}
    for name, conf in describe_topic_configs(admin, names, timeout).items():
        if "max.message.bytes" in conf:
            out[name] = int(conf["max.message.bytes"])
    return out


def _differences(spec: TopicSpec, partitions: int, replication: int, actual: dict[str, str]) -> list[str]:
    diffs = []
    if partitions != spec.partitions:
        diffs.append(f"partitions: declared {spec.partitions}, actual {partitions}")
    if replication != spec.replication_factor:
        diffs.append(f"replication_factor: declared {spec.replication_factor}, actual {replication}")
    for key, want in spec.topic_config().items():
        have = actual.get(key)
        if have != want:
            diffs.append(f"{key}: declared {want}, actual {have}")
    return diffs


def wait_visible(admin: AdminClient | Consumer, names: list[str], timeout: float) -> Any:
    """Cluster metadata once every named topic shows with its partitions. A topic shows in metadata a moment
    after its creation returns (the controller's record reaches the brokers' metadata caches later), so a
    creator, or a sibling that raced it, waits here rather than reading a topic as missing."""
    deadline = time.monotonic() + timeout
    while True:
        md = retrying(lambda: admin.list_topics(timeout=timeout), max(deadline - time.monotonic(), 0.0), pause_s=0.2)
        missing = [n for n in names if n not in md.topics or md.topics[n].error is not None or not md.topics[n].partitions]
        if not missing:
            return md
        if time.monotonic() > deadline:
            raise RftbusError(f"topics {missing} not visible in metadata {timeout:g}s after creation")
        time.sleep(0.2)


def create_new(admin: AdminClient, topics: list[NewTopic], timeout: float = 30.0) -> Any:
    """Create these topics (none may exist yet) and return the metadata once they all show: the one way an
    ad-hoc topic (a bench's, a test's) is made, so nobody reads a just-created topic as missing."""
    for fut in admin.create_topics(topics, request_timeout=timeout).values():
        fut.result(timeout=timeout)
    return wait_visible(admin, [t.topic for t in topics], timeout)


def _visible(admin: AdminClient, names: list[str], timeout: float) -> tuple[Any, dict[str, dict[str, str]]]:
    """Metadata and configs of topics that exist (a config read that lags the metadata is asked again)."""
    return wait_visible(admin, names, timeout), describe_topic_configs(admin, names, timeout)


def create_topics(cfg: Config, admin: AdminClient, timeout: float = 30.0) -> list[TopicResult]:
    """Create missing topics; existing ones are compared with the declaration, never altered."""
    specs = cfg.declared_topics()
    md = admin.list_topics(timeout=timeout)
    results: dict[str, TopicResult] = {}
    new = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=s.topic_config())
        for s in specs.values() if s.name not in md.topics
    ]
    deadline = time.monotonic() + timeout
    while new:
        again = []
        asked = {topic.topic: topic for topic in new}
        for name, fut in admin.create_topics(new, request_timeout=timeout).items():  # keyed by topic name
            topic = asked[name]
            key = next(k for k, s in specs.items() if s.name == name)
            try:
                fut.result(timeout=timeout)
                results[key] = TopicResult(key, topic.topic, "created")
            except KafkaException as e:
                err = e.args[0]
                if err.name() == "TOPIC_ALREADY_EXISTS":  # raced with another creator (or our own earlier try)
                    continue
                if retriable(err) and time.monotonic() < deadline:  # a cluster still starting: ask again
                    again.append(topic)
                    continue
                results[key] = TopicResult(key, topic.topic, "error", error=err.str())
        new = again
        if new:
            time.sleep(0.5)
    created = [results[k].name for k in results if results[k].status == "created"]
    if created:  # callers read a created topic's metadata next: return once it shows
        wait_visible(admin, created, timeout)
    existing = [k for k, s in specs.items() if k not in results]
    if existing:
        md, configs = _visible(admin, [specs[k].name for k in existing], timeout)
        for key in existing:
            spec = specs[key]
            topic = md.topics[spec.name]
            parts = topic.partitions
            replication = len(next(iter(parts.values())).replicas) if parts else 0
            diffs = _differences(spec, len(parts), replication, configs.get(spec.name, {}))
            results[key] = TopicResult(key, spec.name, "differs" if diffs else "exists", diffs)
    return [results[k] for k in specs]
