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

Only the first reading is waited for. Later ones run in a helper thread while the explorer keeps
rolling out on the last figure plus its own groups: a read goes through the groups' coordinators, and
one that is frozen held the explorer's loop 10-31 s per read (#46). A read that fails keeps the last
figure; the estimate still grows with every group this explorer makes, so it stops at the bound alone.

Staleness by construction (#19): a group admitted now trains after pending ÷ g more versions, where g is
the curated groups the trainer finishes per published version (measured over the same window; B until
measured). When the trainer steps with fewer than B groups (MIX steps on demonstrations while RL groups
are scarce, or `trainer.step_wait_s` ends a step early) versions advance faster than B groups a step, and
a bound of (η+1)·B lets groups go stale. So the bound is (η + 1 − lag) · g, where lag is how many
versions the explorer's own weights are behind the newest published: the group is already that old.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from rftbus.ground.config import Config
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.inspect import group_lag


class WindowRatio:
    """Δnumerator ÷ Δdenominator over a sliding window, clamped to [floor, ceiling]; `initial` until
    `min_den` of the denominator has accrued (too little is noise: the last figure is kept)."""

    def __init__(self, floor: float, ceiling: float, min_den: float, initial: float, window_s: float = 30.0):
        self.floor, self.ceiling, self.min_den, self.window_s = floor, ceiling, min_den, window_s
        self.samples: deque[tuple[float, float, float]] = deque()
        self.value = initial

    def update(self, t: float, den: float, num: float) -> float:
        self.samples.append((t, den, num))
        while len(self.samples) > 2 and t - self.samples[1][0] >= self.window_s:
            self.samples.popleft()  # the anchor is the newest sample at least window_s old
        _, d0, n0 = self.samples[0]
        if den - d0 >= self.min_den:
            self.value = min(self.ceiling, max(self.floor, (num - n0) / (den - d0)))
        return self.value


def AcceptanceRate(floor: float, min_records: int, window_s: float = 30.0) -> WindowRatio:
    """Curated groups out ÷ raw groups in of streams, in [floor, 1]; 1 until measured."""
    return WindowRatio(floor, 1.0, min_records, 1.0, window_s)


def ConsumptionRate(batch_groups: int, min_versions: int = 3, window_s: float = 30.0) -> WindowRatio:
    """Curated groups the trainer finishes per published version, in [0, B]; B until measured."""
    return WindowRatio(0.0, float(batch_groups), min_versions, float(batch_groups), window_s)


def admission_bound(max_staleness: int, groups_per_version: float, lag: int) -> float:
    """Groups that may be pending ahead of a new group so that it trains within η of its version."""
    return max(0.0, max_staleness + 1 - lag) * groups_per_version


class Admission:
    def __init__(self, cfg: Config, admin: AdminClient, unacked: Callable[[], int] = lambda: 0,
                 versions: Callable[[], tuple[int | None, int]] = lambda: (None, 0)):
        """`versions`: (the newest published version or None, the explorer's own version)."""
        self.cfg, self.admin, self.unacked, self.versions = cfg, admin, unacked, versions
        self.committed = CommittedOffsets(cfg)  # not the admin API: it can SIGSEGV (kafka/committed.py)
        self.max_bound = (cfg.rl.max_staleness + 1) * cfg.rl.batch_groups
        self.bound = float(self.max_bound)
        self.lag = 0
        self.lanes = [(cfg.streams.app_id, [cfg.topics.raw.name]),
                      (cfg.trainer.group_id, [cfg.topics.curated.name, cfg.topics.curated_priority.name])]
        self.acceptance = AcceptanceRate(cfg.explorer.admission_min_acceptance, min_records=cfg.rl.batch_groups)
        self.consumption = ConsumptionRate(cfg.rl.batch_groups)
        self._lag_groups = 0.0
        self._since_refresh = 0
        self._produced = 0  # this explorer's groups, ever
        self._read_at = self._tried_at = -1e9
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="admission-lags")
        self._reading: tuple[Future, tuple[int, int]] | None = None
        self.reads = 0  # readings taken in
        self.failed_reads = 0
        self.last_error: str | None = None

    def refresh(self) -> None:
        """One reading of the lags, waited for (the first one, and tests)."""
        seen = self._snapshot()
        self._take(seen, *self._read())

    def _snapshot(self) -> tuple[int, int]:
        # before the lags: a group acknowledged in between counts twice, never zero times
        return self.unacked(), self._produced

    def _read(self):
        try:
            return tuple(group_lag(self.admin, self.committed, g, ts) for g, ts in self.lanes)
        except KafkaException as e:  # broker hiccup: keep the last figure, retry next refresh
            raise AdmissionUnavailable(str(e)) from None

    def _poll_reading(self, now: float) -> None:
        """Take in a finished background reading; start the next one when due."""
        if self._reading is not None and self._reading[0].done():
            future, seen = self._reading
            self._reading = None
            try:
                self._take(seen, *future.result())
                self.last_error = None
            except AdmissionUnavailable as e:
                self.failed_reads += 1
                self.last_error = str(e)
        due = self.cfg.explorer.admission_refresh_s
        if self._reading is None and now - self._read_at >= due and now - self._tried_at >= due:
            self._tried_at = now
            self._reading = (self._pool.submit(self._read), self._snapshot())

    def _take(self, seen: tuple[int, int], raw, curated) -> None:
        unseen, produced = seen
        now = time.monotonic()
        a = self.acceptance.update(now, raw.done, curated.end)
        self._lag_groups = a * raw.lag + curated.lag
        latest, own = self.versions()
        if latest is not None:
            by_consumption = self.cfg.explorer.admission_by_consumption
            g = self.consumption.update(now, latest, curated.done) if by_consumption else self.cfg.rl.batch_groups
            self.lag = max(0, latest - own)
            self.bound = admission_bound(self.cfg.rl.max_staleness, g, self.lag)
        self._since_refresh = unseen + self._produced - produced  # and ours made while the lags were read
        self._read_at = now
        self.reads += 1

    def pending(self) -> float:
        """Groups ahead of a new one; raises AdmissionUnavailable until a first reading succeeded."""
        if self.reads == 0:
            self.refresh()
        else:
            self._poll_reading(time.monotonic())
        return self._lag_groups + self.acceptance.value * self._since_refresh

    def read_age_s(self) -> float:
        """Seconds since the figure in use was read."""
        return time.monotonic() - self._read_at

    def close(self) -> None:
        reading = self._reading
        self._pool.shutdown(wait=False, cancel_futures=True)
        if reading is not None:
            try:  # a read still asking a frozen coordinator: its consumers are left to the process's exit
                reading[0].exception(timeout=self.cfg.request_timeout_s)
            except TimeoutError:
                return
        self.committed.close()

    def admit(self) -> bool:
        return self.blocked(self.pending()) is None

    def blocked(self, pending: float) -> str | None:
        """Why a new group may not start with `pending` groups ahead of it, or None. With nothing
        pending one group always may (unless the explorer's weights are already past η): the measured
        rate can be below one group per version, and the trainer's `stale` check stays the guarantee."""
        if pending < self.bound or (pending == 0 and self.lag <= self.cfg.rl.max_staleness):
            return None
        if self.bound < self.max_bound:
            g = self.consumption.value if self.cfg.explorer.admission_by_consumption else self.cfg.rl.batch_groups
            return (f"pending {pending:.1f} groups >= (η+1−lag)·g = ({self.cfg.rl.max_staleness}+1−{self.lag})·"
                    f"{g:.2f} = {self.bound:.1f} (g: groups the trainer takes per version)")
        return f"pending {pending:.1f} groups >= bound (η+1)·B = {self.max_bound}"

    def produced_group(self) -> None:
        self._since_refresh += 1
        self._produced += 1


class AdmissionUnavailable(Exception):
    """The lags could not be read (transient broker error)."""
