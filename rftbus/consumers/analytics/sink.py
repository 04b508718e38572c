"""`rftbus analytics sink`: every rftbus topic into ClickHouse, in batches, exactly counted.

At-least-once + dedup: rows are inserted first, offsets committed after the insert returned (fsynced
parts on chDB); a crash in between re-delivers messages whose rows are already there, and the tables'
ReplacingMergeTree key (topic, partition, offset, id) folds them (see schema.py). On SIGTERM/SIGINT
it drains what is already on the topics (up to `drain_timeout_s`), flushes, commits and exits.

A batch ClickHouse refuses after `insert_retries` (one row with a timestamp out of DateTime64's range failed a
whole batch's insert, and the sink stopped: #63) is bisected while the backend still answers a query: the rows it
takes are inserted, the few it will not are quarantined as `undecodable` rows (reason `insert_refused`, with the
error and their position), and the batch is committed. A backend that answers nothing stops the sink as before.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from rftbus.ground.bisect import culprits
from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.clients import check_reachable, make_admin, make_consumer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import make_codec
from rftbus.ground.status import StatusFile

from .backends import Backend, FolderLocked, open_backend, where
from .backends.base import WriteError
from .batch import Batch

from .rows import TOPIC_RECORDS, Position, to_rows, ts

ROLE = "analytics"  # its status files: <state_dir>/status/analytics-<id>.json
MAX_QUARANTINED = 64  # more rows of one batch refused than this is not a bad row but a bad sink: it stops


@dataclass
class SinkSummary:
    messages: int = 0
    rows: int = 0
    batches: int = 0
    undecodable: dict[str, int] = field(default_factory=dict)
    stopped_by: str = ""


def open_writer(cfg: Config, status: StatusFile, log) -> Backend:
    """The backend for writing; waits for a chDB folder another process holds (a reader, a dying sink)."""
    deadline = time.monotonic() + cfg.analytics.lock_wait_s
    while True:
        try:
            return open_backend(cfg, writable=True)
        except FolderLocked as e:
            if time.monotonic() > deadline:
                raise FolderLocked(f"{e} (waited {cfg.analytics.lock_wait_s:g} s)") from None
            status.update(state="waiting for the chDB folder")
            time.sleep(0.5)


class Sink:
    def __init__(self, cfg: Config, backend: Backend, status: StatusFile, ident: str = "0", *,
                 until_end: bool = False, log=print):
        self.cfg, self.backend, self.status, self.until_end, self.log = cfg, backend, status, until_end, log
        a = cfg.analytics
        # (the Avro topics: an OTLP span export is the streams' input, read into experiences there)
        self.topics = {spec.name: key for key, spec in cfg.topics.all().items() if key in TOPIC_RECORDS}
        self.decode = make_codec(cfg.schema_registry.url, cfg.schema_registry.client).deserializer(None)
        # Static membership: a sink restarted after a crash takes its partitions back at once instead
        # of waiting out the dead member's session timeout.
        self.consumer = make_consumer(cfg, a.group_id, **{"enable.partition.eof": True,
                                                          "group.instance.id": f"{a.group_id}-{ident}"})
        self.batch = Batch(a.batch_rows, a.batch_seconds)
        self.summary = SinkSummary()
        self.assigned: set[tuple[str, int]] = set()
        self.at_end: set[tuple[str, int]] = set()  # reached the end, nothing newer since
        self.eof_at: dict[tuple[str, int], int] = {}  # the offset of each partition's latest end-of-partition
        self.stop_reason = ""
        self._warned: set[tuple[int, str]] = set()
        self._rate = (time.monotonic(), 0)

    # -- consumer group ------------------------------------------------------------------------------
    def _on_assign(self, consumer, parts: list[TopicPartition]) -> None:
        self.assigned |= {(p.topic, p.partition) for p in parts}

    def _on_revoke(self, consumer, parts: list[TopicPartition]) -> None:
        # Write and commit what was read from these partitions while they are still ours.
        self.flush()
        gone = {(p.topic, p.partition) for p in parts}
        self.assigned -= gone
        self.at_end -= gone

    def _on_signal(self, signum, _frame) -> None:
        self.stop_reason = signal.Signals(signum).name

    # -- messages ------------------------------------------------------------------------------------
    def handle(self, msg) -> None:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self.at_end.add((msg.topic(), msg.partition()))
                self.eof_at[(msg.topic(), msg.partition())] = msg.offset()
                return
            if err.fatal():
                raise KafkaException(err)
            if (err.code(), msg.topic() or "") not in self._warned:  # e.g. a topic not created yet
                self._warned.add((err.code(), msg.topic() or ""))
                self.log(f"analytics sink: {msg.topic() or 'consumer'}: {err.str()}")
            return
        tp = (msg.topic(), msg.partition())
        self.at_end.discard(tp)
        pos = Position(self.topics[msg.topic()], msg.topic(), msg.partition(), msg.offset(),
                       msg.timestamp()[1], msg.key())
        rows = to_rows(self.decode, pos, msg.value())
        if rows and rows[0][0] == "undecodable":  # (a group with no kept samples makes no row at all)
            reason = rows[0][1]["reason"]
            self.summary.undecodable[reason] = self.summary.undecodable.get(reason, 0) + 1
        self.batch.add(msg.topic(), msg.partition(), msg.offset(), rows)

    def flush(self) -> None:
        if not len(self.batch):
            return
        b, self.batch = self.batch, Batch(self.batch.max_rows, self.batch.max_seconds)
        t0 = time.perf_counter()
        for table, rows in b.tables.items():
            self._insert(table, rows)
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in b.offsets.items()],
                                 asynchronous=False)
        except KafkaException as e:
            # The rows are written; a re-delivery after a lost commit is folded by the dedup key.
            self.log(f"analytics sink: offset commit failed ({e}); the next batch's commit covers it")
        self.summary.messages += b.messages
        self.summary.rows += b.rows
        self.summary.batches += 1
        self.status.update(messages=self.summary.messages, rows=self.summary.rows, batches=self.summary.batches,
                           undecodable=sum(self.summary.undecodable.values()),
                           last_batch_ms=round(1000 * (time.perf_counter() - t0), 1))

    def _insert(self, table: str, rows: list[dict]) -> None:
        retries = self.cfg.analytics.insert_retries
        for attempt in range(retries + 1):
            try:
                self.backend.insert(table, rows)
                return
            except WriteError as e:
                if attempt == retries:
                    failed = RftbusError(f"analytics sink: inserting {len(rows)} rows into {table} failed "
                                         f"{retries + 1} times; last error: {e}")
                    self._quarantine(table, rows, failed)
                    return
                self.log(f"analytics sink: insert into {table} failed ({e}); retry {attempt + 1}/{retries}")
                self.status.update(state="insert failing, retrying")
                time.sleep(min(10.0, 0.5 * 2 ** attempt))

    def _quarantine(self, table: str, rows: list[dict], failed: RftbusError) -> None:
        """Insert what the backend takes of a refused batch and quarantine the rest, or raise `failed`."""
        try:
            self.backend.query("SELECT 1")
        except Exception as e:  # noqa: BLE001 - whatever the backend raises: it does not answer, so stop
            raise failed from e
        errors: dict[int, str] = {}

        def takes(part) -> bool:
            try:
                self.backend.insert(table, [rows[i] for i in part])
                return True
            except WriteError as e:
                if len(part) == 1:
                    errors[part[0]] = str(e)
                return False

        found = culprits(list(range(len(rows))), takes, max_probes=16 * max(1, len(rows)).bit_length() + 64)
        if not found.isolated or not found.culprits or len(found.culprits) > MAX_QUARANTINED:
            raise failed
        bad = [{**{k: rows[i][k] for k in ("topic", "kafka_topic", "partition", "offset", "kafka_ts")},
                "reason": "insert_refused", "detail": f"{table}: {errors.get(i, failed)}"[:500], "size": 0,
                "key": None} for i in found.culprits]
        try:
            self.backend.insert("undecodable", bad)
        except WriteError:  # the record's own Kafka timestamp may be what is out of range
            now = ts(int(time.time() * 1000))
            self.backend.insert("undecodable", [{**b, "kafka_ts": now} for b in bad])
        self.summary.undecodable["insert_refused"] = self.summary.undecodable.get("insert_refused", 0) + len(bad)
        self.log(f"analytics sink: {len(bad)} of {len(rows)} rows for {table} refused by the backend, quarantined "
                 f"as undecodable (insert_refused); the other {len(rows) - len(bad)} inserted")

    # -- progress ------------------------------------------------------------------------------------
    def _lag(self) -> int:
        lag = 0
        for t, p in list(self.assigned):
            tp = TopicPartition(t, p)
            try:
                lo, hi = self.consumer.get_watermark_offsets(tp, cached=True)
                pos = self.consumer.position([tp])[0].offset
            except KafkaException:
                continue
            if hi >= 0:
                lag += max(0, hi - (pos if pos >= 0 else lo))
        return lag

    def _report(self) -> None:
        now, done = time.monotonic(), self.summary.messages
        t0, n0 = self._rate
        if now - t0 >= 2.0:
            self._rate = (now, done)
            self.status.update(lag=self._lag(), messages_per_s=round((done - n0) / (now - t0), 1))

    def caught_up(self) -> bool:
        return bool(self.assigned) and self.assigned <= self.at_end

    def drain_targets(self) -> dict[tuple[str, int], int]:
        """Each assigned partition's end now: a stop must read at least this far. (An end-of-partition
        seen before the stop says nothing about records written since, so `at_end` is not enough.)"""
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        # One ListOffsets request for all partitions (per-partition watermark queries take ~0.4 s each
        # on a busy broker); read_committed, so the end is the one an end-of-partition reports.
        admin = make_admin(self.cfg)  # held until the futures resolve (they die with the client)
        futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in self.assigned},
                                     isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(timeout=30).offset
            except (KafkaException, TimeoutError) as e:
                self.log(f"analytics sink: no end offset for {tp.topic}[{tp.partition}] ({e}); draining to its next end")
                out[(tp.topic, tp.partition)] = self.eof_at.get((tp.topic, tp.partition), -1) + 1
        return out

    def drained(self, targets: dict[tuple[str, int], int]) -> bool:
        return all(self.eof_at.get(tp, -1) >= end for tp, end in targets.items() if tp in self.assigned)

    # -- the loop --------------------------------------------------------------------------------------
    def run(self) -> SinkSummary:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self.consumer.subscribe(list(self.topics), on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.status.update(state="running")
        drain_until, targets = None, {}
        try:
            while True:
                if self.stop_reason and drain_until is None:
                    self.status.update(state="draining")
                    targets = self.drain_targets()
                    drain_until = time.monotonic() + self.cfg.analytics.drain_timeout_s
                for msg in self.consumer.consume(max(1, self.batch.max_rows - len(self.batch)), self.batch.wait_s()):
                    self.handle(msg)
                if self.batch.due():
                    self.flush()
                self._report()
                if drain_until is not None and self.drained(targets):
                    self.summary.stopped_by = self.stop_reason
                    break
                if self.until_end and drain_until is None and self.caught_up():
                    self.summary.stopped_by = "end"
                    break
                if drain_until is not None and (time.monotonic() > drain_until or not self.assigned):
                    self.summary.stopped_by = self.stop_reason
                    if self.assigned:
                        self.log(f"analytics sink: stopping with lag {self._lag()} after draining "
                                 f"{self.cfg.analytics.drain_timeout_s:g} s")
                    break
            self.flush()
        finally:
            self.consumer.close()
        return self.summary


def run(cfg: Config, ident: str = "0", *, until_end: bool = False, log=print) -> SinkSummary:
    """The sink process: status file, the loop. Readers open the data themselves (reader.py): the sink
    answers no queries."""
    status = StatusFile(cfg.state_dir, ROLE, ident)
    status.update(backend=cfg.analytics.backend, where=where(cfg), messages=0, rows=0, undecodable=0, lag=0)
    status.start()
    backend = None
    try:
        backend = open_writer(cfg, status, log)
        log(f"analytics sink: {backend.describe}, database {cfg.analytics.database}")
        if cfg.kafka.wait_s:  # started beside the broker (rftbus run): subscribe once it and the topics are there
            create_topics(cfg, check_reachable(cfg))
        summary = Sink(cfg, backend, status, ident, until_end=until_end, log=log).run()
    except BaseException:
        status.stop(state="failed")
        raise
    finally:
        if backend is not None:
            backend.close()
    status.stop(state="stopped", stopped_by=summary.stopped_by)
    log(f"analytics sink: stopped ({summary.stopped_by}): {summary.messages} messages, {summary.rows} rows "
        f"in {summary.batches} batches" + (f", undecodable {summary.undecodable}" if summary.undecodable else ""))
    return summary
