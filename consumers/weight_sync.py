"""Following the compacted weights topic: the explorer's view of published weight versions.

A background thread reads `topics.weights` from the beginning (no consumer group: every explorer
needs every version record, and nothing is committed), keeps the newest WeightVersion for
`model.name`, and prefetches it with `load_weights` (sha256 verified) so the explorer's main loop
only has to swap tensors between generations. A missing or corrupt checkpoint is reported and
remembered as refused; the explorer keeps serving the version it has.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from rftbus.config import Config
from rftbus.kafka.clients import make_consumer
from rftbus.kafka.read import consume_ready
from rftbus.schemas import DecodeError, WeightVersion, make_codec
from rftbus.weights import WeightsError, load_weights

log = logging.getLogger("rftbus.weight_sync")


class WeightFollower:
    def __init__(self, cfg: Config, report: Callable[[str], None] | None = None, prefetch: bool = True):
        self.cfg, self.model = cfg, cfg.model.name
        self.topic = cfg.topics.weights.name
        self.report = report or log.warning
        self.prefetch = prefetch
        self.decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(WeightVersion)
        self.latest: WeightVersion | None = None  # newest published record seen (even if refused)
        self.refused: dict[int, str] = {}
        self._ready: tuple[WeightVersion, dict] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.caught_up = threading.Event()  # set once the topic has been read to its end
        self._thread = threading.Thread(target=self._run, name="weight-follower", daemon=True)
        self._fetched = -1

    def start(self) -> WeightFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def latest_version(self) -> int | None:
        with self._lock:
            return self.latest.version if self.latest else None

    def take_ready(self, newer_than: int) -> tuple[WeightVersion, dict] | None:
        """The prefetched newest version if it is newer than `newer_than` (handed over once)."""
        with self._lock:
            ready, self._ready = self._ready, None
        if ready and ready[0].version > newer_than:
            return ready
        return None

    def refuse(self, record: WeightVersion, reason: str) -> None:
        with self._lock:
            self.refused[record.version] = reason
        self.report(f"weights v{record.version} refused: {reason}; keeping the current version")

    def _run(self) -> None:
        consumer = make_consumer(self.cfg, f"rftbus-weight-follower-{uuid.uuid4().hex[:8]}",
                                 **{"enable.partition.eof": True})
        try:
            md = self._metadata(consumer)
            while md is None or md.error is not None or not md.partitions:
                if self._stop.wait(1.0):
                    return
                md = self._metadata(consumer)
            parts = list(md.partitions)
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
            at_end: set[int] = set()
            while not self._stop.is_set():
                for msg in consume_ready(consumer, 101, 0.2):
                    self._on_message(msg, at_end, len(parts))
                self._maybe_fetch()
        finally:
            consumer.close()

    def _metadata(self, consumer):
        """The weights topic's metadata, or None while Kafka is unreachable (retried, not fatal)."""
        try:
            return consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        except KafkaException as e:
            self.report(f"weights topic {self.topic} unreadable ({e.args[0].str() if e.args else e}); retrying")
            return None

    def _on_message(self, msg, at_end: set[int], n_parts: int) -> None:
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                if len(at_end) >= n_parts:
                    self._maybe_fetch()
                    self.caught_up.set()
                return
            self.report(f"reading {self.topic}: {msg.error().str()}")
            return
        at_end.discard(msg.partition())
        try:
            rec = self.decode(msg.value(), None)
        except DecodeError as e:
            self.report(f"{self.topic}[{msg.partition()}]@{msg.offset()} does not decode ({e}); skipped")
            return
        if rec is None or rec.model != self.model:  # None: a tombstone (compaction's delete marker)
            return
        with self._lock:
            if self.latest is None or rec.version > self.latest.version:
                self.latest = rec

    def _maybe_fetch(self) -> None:
        with self._lock:
            rec = self.latest
        if not self.prefetch or rec is None or rec.version <= self._fetched or rec.version in self.refused:
            return
        self._fetched = rec.version
        t0 = time.monotonic()
        try:
            state = load_weights(rec.uri, rec.sha256)
        except WeightsError as e:
            self.refuse(rec, str(e))
            return
        log.info("fetched weights v%d in %.2fs", rec.version, time.monotonic() - t0)
        with self._lock:
            if self._ready is None or self._ready[0].version < rec.version:
                self._ready = (rec, state)


def swap_in_ready(follower: WeightFollower, engine, report: Callable[[str], None], wait_s: float = 0.0) -> bool:
    """Load the follower's prefetched newer version into `engine`; True if it swapped.

    Call it only between generations (explorer: between groups; serve: between batches). Waits up to
    `wait_s` while a newer, not refused version is still being fetched. A state dict that does not
    fit the model is refused (remembered by the follower) and the engine keeps its weights.
    """
    deadline = time.monotonic() + wait_s
    while True:
        ready = follower.take_ready(engine.version)
        if ready:
            rec, state = ready
            try:
                engine.load_weights(state, rec.version)
            except (RuntimeError, ValueError, KeyError) as e:
                follower.refuse(rec, f"does not fit the model: {e}")
                return False
            report(f"weights: now serving v{rec.version}")
            return True
        latest = follower.latest_version()
        behind = latest is not None and latest > engine.version and latest not in follower.refused
        if not behind or time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
