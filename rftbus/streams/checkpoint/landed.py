"""What already went out for an input partition: read back from the output topics' headers.

At-least-once replays everything after the last committed offset, and some of it already produced
output before the crash (or before the partition moved to this worker). The outputs themselves are
the evidence: every one names its source record, its input partition, how many outputs that record
has, which one it is, and the weight version its decision used (outputs.py). A record whose outputs
all landed is done; one partly written keeps the indices that did land and the version, so only the
rest is written again, decided the same way.

Where partitions are replicated, the scan first fences them (rftbus/ground/kafka/fence.py) and reads up to the
fence: the dead worker's last writes may still sit above the high watermark, invisible, and would appear
after a scan that missed them (the cluster chaos run's one duplicated group).
"""

from __future__ import annotations

import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.config import Config
from rftbus.ground.kafka.clients import make_consumer
from rftbus.ground.kafka.fence import fence
from rftbus.ground.kafka.read import read_to_end
from rftbus.streams.checkpoint.deliveries import split_src
from rftbus.streams.headers import H_EXP, H_IN, H_K, H_LATEST, H_N, H_SRC


class Recent:
    """A set that forgets what was added more than `window_s` ago (checked as it grows)."""

    def __init__(self, window_s: float, items=()):
        self.window_s = window_s
        self._d: OrderedDict[str, float] = OrderedDict((k, time.monotonic()) for k in items)

    def add(self, key: str) -> None:
        now = time.monotonic()
        self._d[key] = now
        self._d.move_to_end(key)
        cutoff = now - self.window_s
        while self._d and next(iter(self._d.values())) < cutoff:
            self._d.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)


@dataclass
class Landed:
    """What one input partition already produced: from the scan, then from this worker's own work."""

    done: Recent  # sources whose every output is in the log (or was handed to the producer here)
    groups: Recent  # group ids that already produced output (a second record of one is a duplicate)
    partial: dict[str, tuple[frozenset[int], int]] = field(default_factory=dict)  # src -> (indices, latest)
    scanned: int = 0

    @classmethod
    def empty(cls, cfg: Config) -> Landed:
        """Nothing known to have gone out (a record whose partition was never scanned: it failed before)."""
        window = cfg.streams.dedupe_window_s
        return cls(Recent(window), Recent(window))

    def latest_for(self, src: str) -> int | None:
        found = self.partial.get(src)
        return found[1] if found else None

    def indices(self, src: str) -> frozenset[int]:
        found = self.partial.get(src)
        return found[0] if found else frozenset()

    def finished(self, src: str) -> None:
        self.done.add(src)
        self.partial.pop(src, None)


def done_key(src: str, experience_id: str | None = None) -> str:
    """What `Landed.done` holds for an outcome: its input record, and for the join stage (where one feedback
    record is an input per experience it grades) the experience too."""
    return src if experience_id is None else f"{src}#{experience_id}"


def fenced(cfg: Config) -> bool:
    """Whether recovery scans fence first: `streams.recovery_fence`, else wherever partitions may be
    replicated (three embedded nodes, or a cluster rftbus did not start)."""
    if cfg.streams.recovery_fence is not None:
        return cfg.streams.recovery_fence
    return cfg.replicas > 1 or bool(cfg.kafka.bootstrap_servers)


def scan(cfg: Config, outputs: list[tuple[str, int]], ingest_partition: int, since_ms: int,
         timeout_s: float = 30.0, redo_topics: frozenset[str] = frozenset()) -> Landed:
    """outputs: (topic, partition) to read. Blocking; run it in an executor.

    redo_topics: input topics whose records change state as well as write outputs (raw: the live table, the pass
    rates). A record of one whose outputs all landed is replayed only because its input was not committed, so the
    state it changed was not recovered (rftbus/streams/state.py): it is kept as partial with every index landed, and its
    replay makes its state changes again, decided with the same version, and writes nothing."""
    until = (fence(cfg, outputs, f"{cfg.streams.app_id}-fence-{ingest_partition}", timeout_s)
             if fenced(cfg) else {})
    landed = Landed.empty(cfg)
    seen: dict[str, set[int]] = defaultdict(set)
    sizes: dict[str, tuple[int, int]] = {}
    mine = str(ingest_partition).encode()
    consumer = make_consumer(cfg, f"{cfg.streams.app_id}-recovery", **{"enable.partition.eof": True})
    try:
        by_topic: dict[str, list[int]] = defaultdict(list)  # one read per topic: the join's scan reads every
        for topic, part in outputs:                          # joined partition, and each read has a fixed cost
            by_topic[topic].append(part)
        for topic, parts in by_topic.items():
            end = {p: until[(topic, p)] for p in parts if (topic, p) in until} or None
            for msg in read_to_end(cfg, topic, partitions=parts, since_ms=since_ms, until=end,
                                   timeout_s=timeout_s, consumer=consumer):
                landed.scanned += 1
                pairs: Any = msg.headers() or []  # [(name, value)]
                h: dict[str, bytes] = {k: v for k, v in pairs if isinstance(v, bytes)}
                if h.get(H_IN) != mine or H_SRC not in h or H_K not in h:
                    continue
                src = done_key(h[H_SRC].decode(), h[H_EXP].decode() if H_EXP in h else None)
                seen[src].add(int(h[H_K]))
                key = msg.key()
                if isinstance(key, bytes):
                    landed.groups.add(key.decode(errors="replace"))
                sizes[src] = (int(h.get(H_N, b"1")), int(h.get(H_LATEST, b"-1")))
    finally:
        consumer.close()
    for src, ks in seen.items():
        n, latest = sizes[src]
        redo = "#" not in src and split_src(src)[0] in redo_topics  # (a join-stage outcome names its experience)
        if len(ks) >= n and not redo:
            landed.done.add(src)
        else:
            landed.partial[src] = (frozenset(ks), latest)
    return landed
