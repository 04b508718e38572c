"""The topics the streams app reads and writes, checked (and the internal ones created) before start.

Internal topics (described in rftbus/ground/kafka/registry.py): `<app_id>-join` (feedback and index records, keyed by
experience_id), `<app_id>-joined` (grades, same partition count as raw: co-partitioned with it in the ingest agent)
and the changelogs of the `pending` (join), `live` (held live groups) and `rates` (pass rates) tables. rftbus declares them itself (Faust's
topic_allow_declare is off) so partitions and retention are what this module says.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka import registry
from rftbus.ground.kafka.clients import check_reachable
from rftbus.ground.kafka.retry import retry_kafka
from rftbus.ground.kafka.topics import create_topics, wait_visible

OUTPUT_ROLES = registry.keys(streams_output=True)


@dataclass
class Topology:
    raw: str
    feedback: str
    join: str
    joined: str
    changelog: str
    live_changelog: str
    rates_changelog: str
    raw_partitions: int
    names: dict[str, str]  # role -> topic name for everything the Emitter writes
    partitions: dict[str, int]
    spans: str | None = None  # topics.spans, where otel.enabled (the traces stage's input)
    traces_changelog: str = ""


def prepare(cfg: Config) -> Topology:
    admin = check_reachable(cfg)
    create_topics(cfg, admin)
    t = cfg.topics
    names = {role: getattr(t, role).name for role in OUTPUT_ROLES}
    # Every node's metadata, not only the one that created the topics: on a fresh cluster another node's
    # cache shows a just-created topic a moment later, and reading it as missing crashed the worker (#37).
    md = wait_visible(admin, [t.raw.name, t.feedback.name, *names.values()], 30.0)

    def parts(name: str) -> int:
        tm = md.topics.get(name)
        if tm is None or tm.error is not None or not tm.partitions:
            raise RftbusError(f"topic {name!r} does not exist at {cfg.bootstrap_servers}")
        return len(tm.partitions)

    r = parts(t.raw.name)
    n = cfg.streams.partitions or r
    if n != r:
        raise RftbusError(f"streams.partitions={n} must equal topics.raw partitions ({r}): "
                          "the joined topic is co-partitioned with raw")
    internal = {topic.name(cfg): {"cleanup.policy": topic.cleanup_policy} for topic in registry.INTERNAL}
    missing = []
    for name, conf in internal.items():
        if name in md.topics:
            if len(md.topics[name].partitions) != n:
                raise RftbusError(f"internal topic {name!r} has {len(md.topics[name].partitions)} partitions, "
                                  f"raw has {n}: delete it (it only holds in-flight state) or match them")
            continue
        if conf["cleanup.policy"] == "delete":
            conf = {**conf, "retention.ms": str(cfg.streams.internal_retention_ms)}
        else:  # a changelog record past the commit must outlive compaction until recovery skips it (rftbus/streams/state.py)
            conf = {**conf, "min.compaction.lag.ms": str(registry.CHANGELOG_MIN_COMPACTION_LAG_MS)}
        raw = cfg.declared_topics()["raw"]
        if "min.insync.replicas" in raw.config:
            conf = {**conf, "min.insync.replicas": raw.config["min.insync.replicas"]}
        missing.append(NewTopic(name, n, raw.replication_factor, config=conf))
    if missing:
        retry_kafka(lambda: _create(admin, missing), "creating the streams' internal topics")
    md = wait_visible(admin, [t.raw.name, *names.values(), *internal], 30.0)
    names.update(join=registry.JOIN.name(cfg), joined=registry.JOINED.name(cfg))
    spans = None
    if cfg.otel.reads_traces:  # the traces stage writes groups to raw and grades to feedback
        names.update(raw=t.raw.name, feedback=t.feedback.name)
        spans = t.spans.name
        wait_visible(admin, [spans], 30.0)
        if parts(spans) != n:  # (the traces table's changelog has raw's count: co-partitioned with spans)
            raise RftbusError(f"topics.spans has {parts(spans)} partitions, raw has {n}: give them the same count "
                              "(the traces stage keeps each trace's state in its spans partition)")
    partitions = {role: parts(name) for role, name in names.items()}
    return Topology(raw=t.raw.name, feedback=t.feedback.name, join=names["join"], joined=names["joined"],
                    changelog=registry.PENDING_CHANGELOG.name(cfg), live_changelog=registry.LIVE_CHANGELOG.name(cfg),
                    rates_changelog=registry.RATES_CHANGELOG.name(cfg), raw_partitions=r,
                    names=names, partitions=partitions, spans=spans,
                    traces_changelog=registry.TRACES_CHANGELOG.name(cfg))


def _create(admin, topics: list[NewTopic]) -> None:
    """Create topics; one that exists already (a sibling worker made it, or an earlier try did) is fine."""
    for fut in admin.create_topics(topics).values():
        try:
            fut.result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
