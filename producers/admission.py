"""Staleness admission: admit a new group only while pending < (η + 1) × B.

pending = a × (streams' lag on raw + the explorer's own groups the lags cannot see yet: those still
awaiting Kafka's acknowledgement when the lags were read, plus those produced since) + the trainer's
lag on the curated lanes; lags are from committed offsets, and a record is a group. `a` is streams'
recent acceptance rate (curated groups out ÷ raw groups in over the last 30 s, at least
`explorer.admission_min_acceptance`, default 1 = off): a group streams will drop (zero-variance,
most groups once a policy sharpens) never reaches the trainer, so counting it in full idles
explorers that have hardware of their own. (On two shared cores one run with it made 1.6× the
groups for the same trainer steps, and more `stale`; docs/BENCHMARKS.md.) Lags are re-read every
`explorer.admission_refresh_s`; in between, counting our own output keeps the estimate
conservative. Several explorers may each admit one group at the bound, so the overshoot is at most
(explorers − 1) groups; the trainer's `stale` check is the hard guarantee.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from rftbus.config import Config
from rftbus.kafka.committed import CommittedOffsets
from rftbus.kafka.inspect import group_lag


class AcceptanceRate:
    """Curated output ÷ raw input of streams over a sliding window, in [floor, 1]; 1 until measured."""

    def __init__(self, floor: float, min_records: int, window_s: float = 30.0):
        self.floor, self.min_records, self.window_s = floor, min_records, window_s
        self.samples: deque[tuple[float, int, int]] = deque()
        self.value = 1.0

    def update(self, t: float, raw_done: int, curated_end: int) -> float:
        self.samples.append((t, raw_done, curated_end))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.window_s:
            self.samples.popleft()  # the anchor is the newest sample at least window_s old
        _, r0, c0 = self.samples[0]
        if raw_done - r0 >= self.min_records:  # too few records is noise: keep the last figure
            self.value = min(1.0, max(self.floor, (curated_end - c0) / (raw_done - r0)))
        return self.value


class Admission:
    def __init__(self, cfg: Config, admin: AdminClient, unacked: Callable[[], int] = lambda: 0):
        self.cfg, self.admin, self.unacked = cfg, admin, unacked
        self.committed = CommittedOffsets(cfg)  # not the admin API: it can SIGSEGV (kafka/committed.py)
        self.bound = (cfg.rl.max_staleness + 1) * cfg.rl.batch_groups
        self.lanes = [(cfg.streams.app_id, [cfg.topics.raw.name]),
                      (cfg.trainer.group_id, [cfg.topics.curated.name, cfg.topics.curated_priority.name])]
        self.acceptance = AcceptanceRate(cfg.explorer.admission_min_acceptance, min_records=cfg.rl.batch_groups)
        self._lag_groups = 0.0
        self._since_refresh = 0
        self._read_at = -1e9

    def refresh(self) -> None:
        unseen = self.unacked()  # read before the lags: a group acknowledged in between counts twice, never zero times
        try:
            raw, curated = (group_lag(self.admin, self.committed, g, ts) for g, ts in self.lanes)
        except KafkaException as e:  # broker hiccup: keep the last figure, retry next refresh
            raise AdmissionUnavailable(str(e)) from None
        now = time.monotonic()
        a = self.acceptance.update(now, raw.done, curated.end)
        self._lag_groups = a * raw.lag + curated.lag
        self._since_refresh = unseen
        self._read_at = now

    def pending(self) -> float:
        if time.monotonic() - self._read_at >= self.cfg.explorer.admission_refresh_s:
            self.refresh()
        return self._lag_groups + self.acceptance.value * self._since_refresh

    def close(self) -> None:
        self.committed.close()

    def admit(self) -> bool:
        return self.pending() < self.bound

    def produced_group(self) -> None:
        self._since_refresh += 1


class AdmissionUnavailable(Exception):
    """The lags could not be read (transient broker error)."""
