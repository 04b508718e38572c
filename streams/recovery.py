"""What already went out for an input partition: read back from the output topics' headers.

At-least-once replays everything after the last committed offset, and some of it already produced
output before the crash (or before the partition moved to this worker). The outputs themselves are
the evidence: every one names its source record and input partition. A group counts as done when
all of its outputs (rftbus-n of them) are in the log; a partly written group keeps the sources that
did land, so only the rest is produced again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, TopicPartition

from rftbus.config import Config
from rftbus.kafka.clients import make_consumer
from rftbus.streams.outputs import H_GROUP, H_IN, H_N, H_SRC


@dataclass
class Landed:
    done: set[str] = field(default_factory=set)  # sources whose whole output is in the log
    partial: dict[str, set[str]] = field(default_factory=dict)  # group -> sources already written
    expert: set[str] = field(default_factory=set)  # sources whose expert copy is in the log
    scanned: int = 0


def scan(cfg: Config, outputs: dict[str, tuple[str, int]], ingest_partition: int, since_ms: int,
         timeout_s: float = 30.0) -> Landed:
    """outputs: role -> (topic, partition). Blocking; run it in an executor."""
    consumer = make_consumer(cfg, f"{cfg.streams.app_id}-recovery", **{"enable.partition.eof": True})
    landed = Landed()
    groups: dict[str, set[str]] = defaultdict(set)
    sizes: dict[str, int] = {}
    mine = str(ingest_partition).encode()
    try:
        starts = consumer.offsets_for_times(
            [TopicPartition(t, p, max(0, since_ms)) for t, p in outputs.values()], timeout=timeout_s)
        role_of = {t: r for r, (t, _) in outputs.items()}
        todo = {}
        for tp in starts:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=timeout_s)
            start = tp.offset if tp.offset >= 0 else hi
            if start < hi:
                todo[(tp.topic, tp.partition)] = (start, hi)
        if not todo:
            return landed
        consumer.assign([TopicPartition(t, p, s) for (t, p), (s, _) in todo.items()])
        remaining = set(todo)
        while remaining:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            tp = (msg.topic(), msg.partition())
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    remaining.discard(tp)
                    continue
                raise RuntimeError(f"recovery scan of {tp}: {msg.error().str()}")
            if msg.offset() >= todo[tp][1] - 1:
                remaining.discard(tp)
            landed.scanned += 1
            h = dict(msg.headers() or [])
            if h.get(H_IN) != mine or H_SRC not in h:
                continue
            src = h[H_SRC].decode()
            if role_of[msg.topic()] == "expert":
                landed.expert.add(src)
            elif H_GROUP in h:
                gid = h[H_GROUP].decode()
                groups[gid].add(src)
                sizes[gid] = int(h[H_N])
            else:
                landed.done.add(src)
    finally:
        consumer.close()
    for gid, srcs in groups.items():
        if len(srcs) >= sizes[gid]:
            landed.done |= srcs
        else:
            landed.partial[gid] = srcs
    return landed
