"""Following the compacted weights topic: every process's view of published weight versions.

The one follower of `topics.weights` (explorers, serve, the streams, the run's evaluator all use it).
A background thread reads the topic from the beginning (no consumer group: every reader needs every
version record, and nothing is committed), keeps the newest WeightVersion for `model.name`, and with
`prefetch` fetches it through the weights transport (sha256 verified) so an engine only has to swap tensors
between generations. A record is believed only if rftbus/ground/weights/admit.py admits it (the transport's check: for the
store, the uri is the store's for that version and the file is there; the version is not far ahead); a refused record, or a checkpoint that is
missing, corrupt, non-finite or does not fit, is reported, counted and remembered as refused, and the reader
keeps the version it had: `latest` is never a refused record. `published` reads the topic once to its end.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import make_consumer
from rftbus.ground.kafka.read import consume_ready, read_to_end
from rftbus.ground.schemas import DecodeError, WeightVersion, make_codec
from rftbus.ground.weights.admit import refusal
from rftbus.ground.weights.transport import make_transport
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store (torch) loads only where weights are prefetched: not in a streams worker
    from rftbus.ground.weights.store import Payload

log = logging.getLogger("rftbus.ground.weights")
MAX_REFUSED = 1000
MAX_ADMITTED = 16
MAX_SEEN = 10_000  # version records kept for `load` (a record is ~200 bytes)


class WeightFollower:
    def __init__(self, cfg: Config, report: Callable[[str], None] | None = None, prefetch: bool = True,
                 model: str | None = None):
        self.cfg, self.model = cfg, model or cfg.model.name  # model: another lineage's key (serve behind the gate)
        self.topic = cfg.topics.weights.name
        self.report = report or log.warning
        self.prefetch = prefetch
        self.transport = make_transport(cfg)
        self.decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(WeightVersion)
        self.latest: WeightVersion | None = None  # newest record admitted and not refused since
        self._admitted: list[WeightVersion] = []  # the last few admitted, newest last: what a refusal falls back to
        self.refused: dict[int, str] = {}  # the last MAX_REFUSED refused versions, with why
        self.refused_count = 0
        self._backlog: list[WeightVersion] = []  # records read before the end of the topic's history
        self._ready: tuple[WeightVersion, Payload] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.caught_up = threading.Event()  # set once the topic has been read to its end
        self._thread = threading.Thread(target=self._run, name="weight-follower", daemon=True)
        self._fetched = -1
        self.seen: dict[int, WeightVersion] = {}  # every record of the model read, by version (`load`)

    def start(self) -> WeightFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def latest_version(self) -> int | None:
        with self._lock:
            return self.latest.version if self.latest else None

    @property
    def version(self) -> int:
        """The latest published version, 0 before any (v0 is built from the seed in every process)."""
        v = self.latest_version()
        return 0 if v is None else v

    async def wait_for(self, version: int, timeout_s: float) -> int:
        """The latest version once it reaches `version` or `timeout_s` passed (a newer experience than
        the follower has seen is usually a race with the trainer's publish, not an unknown version)."""
        deadline = time.monotonic() + timeout_s
        while self.version < version and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.version

    def take_ready(self, newer_than: int) -> tuple[WeightVersion, Payload] | None:
        """The prefetched newest version if it is newer than `newer_than` (handed over once)."""
        with self._lock:
            ready, self._ready = self._ready, None
        if ready and ready[0].version > newer_than:
            return ready
        return None

    def load(self, version: int) -> Payload:
        """Version `version` as published (admitted as any record is, sha256 verified): for a reader that serves
        versions other than the newest (serve behind the promotion gate)."""
        with self._lock:
            rec = self.seen.get(version)
        if rec is None:
            raise RftbusError(f"weights v{version} of {self.model} is not on {self.topic} (not yet, or compacted away)")
        why = refusal(rec, self.cfg, None, transport=self.transport)
        if why is not None:
            raise RftbusError(f"weights v{version} refused: {why}")
        return self.transport.fetch(rec)

    def defer(self, record: WeightVersion, payload: Payload) -> None:
        """Hand a version back (its swap was deferred): taken again unless a newer one arrived meanwhile."""
        with self._lock:
            if self._ready is None or self._ready[0].version < record.version:
                self._ready = (record, payload)

    def refuse(self, record: WeightVersion, reason: str) -> None:
        with self._lock:
            self._refuse(record, reason)
        self.report(f"weights v{record.version} refused: {reason}; keeping the current version")

    def _refuse(self, record: WeightVersion, reason: str) -> None:
        self.refused[record.version] = reason
        self.refused_count += 1
        while len(self.refused) > MAX_REFUSED:
            self.refused.pop(next(iter(self.refused)))
        self._admitted = [r for r in self._admitted if r.version != record.version]
        if self.latest is not None and self.latest.version == record.version:
            self.latest = self._admitted[-1] if self._admitted else None

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
                if len(at_end) >= n_parts and not self.caught_up.is_set():
                    self._caught_up()
                    self._maybe_fetch()
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
            self.seen[rec.version] = rec
            while len(self.seen) > MAX_SEEN:
                self.seen.pop(min(self.seen))
        if not self.caught_up.is_set():  # reading history: only the newest few records matter, judged at its end
            if rec.version not in {r.version for r in self._backlog}:  # the newest few versions, whatever their order
                self._backlog = sorted([*self._backlog, rec], key=lambda r: r.version)[-MAX_ADMITTED:]
            return
        self._consider(rec)

    def _consider(self, rec: WeightVersion) -> bool:
        """Admit `rec` as the latest, or refuse it (reported); True if admitted."""
        with self._lock:
            newest = self.latest.version if self.latest else None
        if (newest is not None and rec.version <= newest) or rec.version in self.refused:
            return False
        why = refusal(rec, self.cfg, newest, transport=self.transport)
        with self._lock:
            if why is not None:
                self._refuse(rec, why)
            else:
                self.latest = rec
                self._admitted = [*self._admitted[-(MAX_ADMITTED - 1):], rec]
        if why is not None:
            self.report(f"weights v{rec.version} refused: {why}; keeping the current version")
        return why is None

    def _caught_up(self) -> None:
        """The end of the history: the newest record of it that is admitted becomes the latest (older ones were
        superseded; their files may be gone from the store already)."""
        backlog, self._backlog = self._backlog, []
        for rec in reversed(backlog):
            if self._consider(rec):
                break
        self.caught_up.set()

    def _maybe_fetch(self) -> None:
        with self._lock:
            rec = self.latest
        if not self.prefetch or rec is None or rec.version <= self._fetched or rec.version in self.refused:
            return
        self._fetched = rec.version
        t0 = time.monotonic()
        from rftbus.ground.weights.store import WeightsError

        try:
            state = self.transport.fetch(rec)
        except WeightsError as e:
            self.refuse(rec, str(e))
            return
        log.info("fetched weights v%d in %.2fs", rec.version, time.monotonic() - t0)
        with self._lock:
            if self._ready is None or self._ready[0].version < rec.version:
                self._ready = (rec, state)


def published(cfg: Config, model: str | None = None, timeout_s: float = 60.0) -> dict[int, WeightVersion]:
    """Every WeightVersion of `model` (default cfg.model.name) on the weights topic now, by version."""
    model = model or cfg.model.name
    decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(WeightVersion)
    found: dict[int, WeightVersion] = {}
    for msg in read_to_end(cfg, cfg.topics.weights.name, timeout_s=timeout_s):
        if msg.key() != model.encode():
            continue
        try:
            rec = decode(msg.value(), None)
        except DecodeError:  # a foreign or corrupt record under our key: not a version we published
            continue
        if isinstance(rec, WeightVersion):
            found[rec.version] = rec
    return found


def latest_published(cfg: Config, model: str | None = None) -> WeightVersion | None:
    """The newest WeightVersion of `model` on the weights topic that admit.py believes (its uri is the store's,
    its file is there), or None before the first."""
    versions, transport = published(cfg, model), make_transport(cfg)
    for v in sorted(versions, reverse=True):
        if refusal(versions[v], cfg, None, transport=transport) is None:
            return versions[v]
    return None
