"""What `rftbus status` shows: topics with their layout and retention, consumer groups with lag."""

from __future__ import annotations

from concurrent.futures import wait as wait_futures
from dataclasses import asdict, dataclass, field

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.topics import describe_topic_configs


@dataclass
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int
    cleanup_policy: str | None
    retention_ms: str | None
    messages: int  # sum over partitions of (high watermark - low watermark)
    leaders: dict[int, int] = field(default_factory=dict)  # partition -> leader node (-1: none)
    isr: dict[int, list[int]] = field(default_factory=dict)  # partition -> in-sync replicas
    under_replicated: int = 0  # partitions whose ISR is smaller than their replica set


def partition_layout(admin: AdminClient, timeout: float = 10.0) -> dict[str, dict[int, tuple[int, list[int], list[int]]]]:
    """topic -> partition -> (leader, replicas, in-sync replicas), from the cluster's metadata."""
    md = admin.list_topics(timeout=timeout)
    return {n: {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in t.partitions.items()}
            for n, t in md.topics.items() if not n.startswith("__")}


@dataclass
class GroupInfo:
    group_id: str
    state: str
    lag: int
    partitions: dict[str, int] = field(default_factory=dict)  # "topic[p]" -> lag


def _offsets(admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec, timeout: float) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    futs = admin.list_offsets({tp: spec for tp in tps}, request_timeout=timeout)
    return {(tp.topic, tp.partition): f.result(timeout=timeout).offset for tp, f in futs.items()}


def topics_info(admin: AdminClient, timeout: float = 10.0) -> list[TopicInfo]:
    md = admin.list_topics(timeout=timeout)
    names = sorted(n for n in md.topics if not n.startswith("__"))
    configs = describe_topic_configs(admin, names, timeout)
    tps = [TopicPartition(n, p) for n in names for p in md.topics[n].partitions]
    high = _offsets(admin, tps, OffsetSpec.latest(), timeout)
    low = _offsets(admin, tps, OffsetSpec.earliest(), timeout)
    out = []
    for n in names:
        parts = md.topics[n].partitions
        rf = len(next(iter(parts.values())).replicas) if parts else 0
        msgs = sum(high.get((n, p), 0) - low.get((n, p), 0) for p in parts)
        c = configs.get(n, {})
        lay = {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in parts.items()}
        out.append(TopicInfo(n, len(parts), rf, c.get("cleanup.policy"), c.get("retention.ms"), msgs,
                             leaders={p: v[0] for p, v in sorted(lay.items())},
                             isr={p: sorted(v[2]) for p, v in sorted(lay.items())},
                             under_replicated=sum(len(v[2]) < len(v[1]) for v in lay.values())))
    return out


def groups_info(admin: AdminClient, committed_of: CommittedOffsets, timeout: float = 10.0,
                only: set[str] | None = None, topics: set[str] | None = None) -> list[GroupInfo]:
    """Every group's lag on the partitions it has committed in (user topics only); `only` these groups, on
    `topics` only: a broker shared by many runs has many of both, and each costs a round trip."""
    listing = admin.list_consumer_groups(request_timeout=timeout).result(timeout=timeout)
    md = admin.list_topics(timeout=timeout)
    every = [TopicPartition(n, p) for n in sorted(md.topics) if not n.startswith("__")
             and (topics is None or n in topics) for p in md.topics[n].partitions]
    high = _offsets(admin, every, OffsetSpec.latest(), timeout)
    out = []
    for g in sorted(listing.valid, key=lambda g: g.group_id):
        if only is not None and g.group_id not in only:
            continue
        try:
            committed = {tp: off for tp, off in committed_of(g.group_id, every, timeout).items() if off >= 0}
        except KafkaException:
            committed = {}
        per: dict[str, int] = {}
        for (topic, part), off in sorted(committed.items()):
            per[f"{topic}[{part}]"] = max(0, high.get((topic, part), 0) - off)
        state = getattr(g.state, "name", str(g.state)).lower()
        out.append(GroupInfo(g.group_id, state, sum(per.values()), per))
    return out


@dataclass
class Lag:
    lag: int  # records not yet committed by the group
    done: int  # records committed (summed over partitions)
    end: int  # records written (summed end offsets)


def group_lag(admin: AdminClient, committed_of: CommittedOffsets, group: str, topics: list[str]) -> Lag:
    """Records in `topics` not yet committed by consumer group `group` (all, if it has none)."""
    md = admin.list_topics(timeout=10)
    parts = [TopicPartition(t, p) for t in topics if (tm := md.topics.get(t)) is not None and tm.error is None
             for p in tm.partitions]
    if not parts:
        return Lag(0, 0, 0)
    ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts})
    starts = admin.list_offsets({tp: OffsetSpec.earliest() for tp in parts})
    committed = committed_of(group, parts)
    out = Lag(0, 0, 0)
    for tp in parts:
        end = ends[tp].result().offset
        done = max(committed.get((tp.topic, tp.partition), -1), starts[tp].result().offset)
        out.lag += max(0, end - done)
        out.done += done
        out.end += end
    return out


def as_dicts(items: list) -> list[dict]:
    return [asdict(i) for i in items]


def backlog(admin: AdminClient, topic: str, positions: dict[int, int], wait_s: float = 2.0) -> int:
    """Records of `topic` past a reader's own positions (partition -> next offset it will take) that it can read
    now, without asking the group coordinator (a frozen one held that question 10-30 s, and the commits a reader
    makes meanwhile fail, so committed offsets stand still). A partition whose leader does not answer within
    wait_s counts as nothing waiting: the reader cannot fetch from that leader either until its request times
    out, and counted, its records held back the next pass while the trainer ran dry (#46). A partition never
    seen counts as read."""
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in positions},
                                 request_timeout=wait_s)
    wait_futures(list(futures.values()), timeout=wait_s)  # one deadline for all
    return sum(max(0, fut.result().offset - positions[tp.partition]) for tp, fut in futures.items()
               if fut.done() and fut.exception() is None)
