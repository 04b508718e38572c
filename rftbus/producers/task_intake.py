"""The explorer's side of the tasks topic: group membership, which fetched tasks may be committed, and which
were already handled.

It owns the tasks consumer, the `AckTracker` (a task's offset is committed only once Kafka acknowledged every
record made from it, so a crash redoes a task rather than losing its group) and `SeenTasks` (a task redone
after a rebalance or a restart is skipped, not rolled out twice), and keeps the three right across
rebalances. The explorer asks it for tasks and says when each is begun, produced from and finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaException, Message, TopicPartition

from rftbus.ground.config import Config, ConfigError
from rftbus.ground.kafka.clients import make_consumer
from rftbus.producers.acks import AckTracker
from rftbus.producers.seen_tasks import SeenTasks
from rftbus.ground.status import StatusFile


class TaskIntake:
    def __init__(self, cfg: Config, flush: Callable[[float], object], status: StatusFile,
                 report: Callable[[str], None]):
        """`flush(timeout)`: the explorer's producer, flushed before a partition is given up."""
        ex = cfg.explorer
        static = {}
        if ex.static_membership:  # KIP-345: a restart with the same id rejoins without a rebalance
            if not ex.id:
                raise ConfigError("explorer.static_membership needs an explicit explorer id (explorer.id / --id)")
            static = {"group.instance.id": f"{ex.group_id}-{ex.id}"}
        self.consumer = make_consumer(cfg, ex.group_id, **static)
        self.topic = cfg.topics.tasks.name
        self.acks, self.seen = AckTracker(), SeenTasks(cfg)
        self.flush, self.status, self.report = flush, status, report
        self.held: Message | None = None  # a fetched task waiting for admission
        self.paused = False
        self.last_activity = time.monotonic()
        self.commit_s = 0.0

    def subscribe(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        self.last_activity = time.monotonic()

    # -- fetching ---------------------------------------------------------------------------------
    def hold_next(self, timeout: float) -> bool:
        """Fetch the next task into `held` unless one is held already; False when none came."""
        if self.held is None:
            self.held = self._poll(timeout)
        return self.held is not None

    def take_held(self) -> Message:
        msg, self.held = self.held, None
        assert msg is not None
        return msg

    def more(self, n: int) -> list[Message]:
        """Up to n more tasks already fetched (no waiting)."""
        out: list[Message] = []
        while len(out) < n:
            msg = self._poll(0)
            if msg is None:
                break
            out.append(msg)
        return out

    def _poll(self, timeout: float) -> Message | None:
        while True:
            msg = self.consumer.poll(timeout)
            if msg is None:
                return None
            err = msg.error()
            if err is None:
                return msg
            self.report(f"reading {self.topic}: {err.str()}")
            if timeout:  # one wait per call, as the loop expects
                return None

    def pause(self) -> None:
        """Stop fetching (membership kept) while a held task waits for admission."""
        if not self.paused:
            self.consumer.pause(self.consumer.assignment())
            self.paused = True

    def resume(self) -> bool:
        """Fetch again; True if it was paused."""
        if not self.paused:
            return False
        self.consumer.resume(self.consumer.assignment())
        self.paused = False
        return True

    def serve_while_paused(self, timeout: float) -> None:
        """Serve rebalances while paused; anything fetched anyway is rewound, not lost."""
        stray = self.consumer.poll(timeout)
        if stray is not None and not stray.error():
            self.consumer.seek(TopicPartition(self.topic, stray.partition() or 0, stray.offset() or 0))

    # -- offsets ----------------------------------------------------------------------------------
    def commit(self, sync: bool = False) -> None:
        """Commit the acknowledged prefix; async in the loop, sync on revoke and shutdown."""
        ready = self.acks.committable()
        if not ready:
            return
        t0 = time.perf_counter()
        offsets = [TopicPartition(self.topic, p, o) for p, o in ready.items()]
        try:
            if sync:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self.consumer.commit(offsets=offsets)
        except KafkaException as e:
            self.report(f"commit of task offsets {ready} failed ({e}); those tasks may be redone by another explorer")
        self.commit_s += time.perf_counter() - t0

    def idle(self, idle_exit_s: float) -> bool:
        """No task for idle_exit_s, nothing awaiting acknowledgement and every assigned partition read to its
        end. Quiet alone is not idle: a loaded broker can take longer than idle_exit_s to hand over committed
        offsets (coordinator load in progress)."""
        if time.monotonic() - self.last_activity <= idle_exit_s or not self.consumer.assignment() \
                or self.acks.outstanding_groups():
            return False
        for tp in self.consumer.position(self.consumer.assignment()):
            try:
                _, high = self.consumer.get_watermark_offsets(tp, timeout=5)
            except KafkaException:
                return False
            if high > 0 and (tp.offset < 0 or tp.offset < high):
                return False
        return True

    # -- rebalances -------------------------------------------------------------------------------
    def _on_assign(self, consumer, partitions) -> None:
        self.last_activity = time.monotonic()
        for tp in consumer.committed(partitions, timeout=30):
            self.seen.rebuild(self.topic, tp.partition, tp.offset)
        self.status.update(partitions=sorted({tp.partition for tp in consumer.assignment()} |
                                             {tp.partition for tp in partitions}))

    def _on_revoke(self, consumer, partitions) -> None:
        self.flush(60)
        self.commit(sync=True)
        self._forget([tp.partition for tp in partitions])

    def _on_lost(self, consumer, partitions) -> None:
        self._forget([tp.partition for tp in partitions])

    def _forget(self, gone: list[int]) -> None:
        if self.held is not None and self.held.partition() in gone:
            self.held = None
        self.acks.drop(gone)
        self.seen.drop(gone)

    def close(self) -> None:
        """Flush, commit what was acknowledged, leave the group."""
        self.flush(60)
        self.commit(sync=True)
        self.consumer.close()
