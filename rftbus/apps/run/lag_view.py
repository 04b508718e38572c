"""The consumer lags `rftbus run` shows (live view, /metrics), read by a `Ticker`, off the watch loop.

Reading them asks each group's coordinator for its committed offsets; a frozen coordinator held each read
for seconds, and on the watch loop it held the next pass of demonstrations with it: the trainer ran out of
them through every coordinator freeze (#46). The loop takes the last figure read."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException

from rftbus.ground.config import Config
from rftbus.ground.kafka.committed import CommittedOffsets
from rftbus.ground.kafka.inspect import groups_info
from rftbus.apps.run.ticker import Ticker


class LagView:
    def __init__(self, cfg: Config, admin, groups: dict[str, str], note: Callable[[str], None],
                 every_s: float = 2.0):
        """`groups`: consumer group -> the name the view shows; `note`: the run's event log."""
        self.cfg, self.admin, self.groups, self.note = cfg, admin, groups, note
        self.committed = CommittedOffsets(cfg)  # its own: the task feed reads committed offsets from its thread
        self.topics = {t.name for t in cfg.topics.all().values()}
        self.lags: dict[str, int] = {}  # the last figure read
        self._ticker = Ticker(self._read, every_s, "lag-view", note)

    def start(self) -> LagView:
        self._ticker.start()
        return self

    def _read(self) -> None:
        try:
            infos = groups_info(self.admin, self.committed, timeout=5, only=set(self.groups), topics=self.topics)
        except (KafkaException, TimeoutError) as e:  # a broker restart, a frozen coordinator: keep the last
            self.note(f"consumer lags unreadable ({type(e).__name__}: {e}); retrying")
            return
        self.lags = {self.groups[g.group_id]: g.lag for g in infos}

    def stop(self) -> None:
        if self._ticker.stop():  # (one still asking a frozen node keeps its consumers to the process's exit)
            self.committed.close()
