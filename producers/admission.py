"""Staleness admission: admit a new group only while pending < (η + 1) × B.

pending = (streams' lag on raw + trainer's lag on the curated lanes, both from committed offsets,
in experiences ÷ n) + the explorer's own groups that the lags cannot see yet: those still awaiting
Kafka's acknowledgement when the lags were read, plus those produced since. Lags are re-read every
`explorer.admission_refresh_s`; in between, counting our own output keeps the estimate conservative. Several explorers may each admit one group at the bound, so the overshoot is at most
(explorers − 1) groups; the trainer's `stale` check is the hard guarantee.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from rftbus.config import Config


class Admission:
    def __init__(self, cfg: Config, admin: AdminClient, unacked: Callable[[], int] = lambda: 0):
        self.cfg, self.admin, self.unacked = cfg, admin, unacked
        self.bound = (cfg.rl.max_staleness + 1) * cfg.rl.batch_groups
        self.lanes = [(cfg.streams.app_id, [cfg.topics.raw.name]),
                      (cfg.trainer.group_id, [cfg.topics.curated.name, cfg.topics.curated_priority.name])]
        self._lag_groups = 0.0
        self._since_refresh = 0
        self._read_at = -1e9

    def _partitions(self, topics: list[str]) -> list[TopicPartition]:
        out = []
        md = self.admin.list_topics(timeout=10)
        for t in topics:
            tm = md.topics.get(t)
            if tm is not None and tm.error is None:
                out += [TopicPartition(t, p) for p in tm.partitions]
        return out

    def group_lag(self, group: str, topics: list[str]) -> int:
        """Records in `topics` not yet committed by consumer group `group` (all, if it has none)."""
        parts = self._partitions(topics)
        if not parts:
            return 0
        ends = self.admin.list_offsets({tp: OffsetSpec.latest() for tp in parts})
        starts = self.admin.list_offsets({tp: OffsetSpec.earliest() for tp in parts})
        fut = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, parts)])
        committed = {(tp.topic, tp.partition): tp.offset for tp in fut[group].result().topic_partitions}
        lag = 0
        for tp in parts:
            end = ends[tp].result().offset
            start = starts[tp].result().offset
            done = committed.get((tp.topic, tp.partition), -1)
            lag += max(0, end - max(done, start))
        return lag

    def refresh(self) -> None:
        unseen = self.unacked()  # read before the lags: a group acknowledged in between counts twice, never zero times
        try:
            lag = sum(self.group_lag(g, ts) for g, ts in self.lanes)
        except KafkaException as e:  # broker hiccup: keep the last figure, retry next refresh
            raise AdmissionUnavailable(str(e)) from None
        self._lag_groups = lag / self.cfg.rl.group_size
        self._since_refresh = unseen
        self._read_at = time.monotonic()

    def pending(self) -> float:
        if time.monotonic() - self._read_at >= self.cfg.explorer.admission_refresh_s:
            self.refresh()
        return self._lag_groups + self._since_refresh

    def admit(self) -> bool:
        return self.pending() < self.bound

    def produced_group(self) -> None:
        self._since_refresh += 1


class AdmissionUnavailable(Exception):
    """The lags could not be read (transient broker error)."""
