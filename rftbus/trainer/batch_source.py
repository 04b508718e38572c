"""The trainer's batch consumer: whole groups from the curated lanes (priority first) and expert.

Every record is one group, so a partition is consumed strictly in offset order: the trainer takes,
trains or rejects the records at the head of each lane, never one behind a record still waiting. A
partition's position is therefore one plain offset, the first record not yet done. The trainer saves
these positions inside each checkpoint and seeks to them on restart, which is what makes training
exactly-once in the model's lineage; Kafka's committed offset is the same number (for lag and admission).

A record that does not decode is not dropped where it is read: it waits in its lane like any other
and is rejected (`reject`) when it reaches the head, so the positions stay plain offsets.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from rftbus.ground.errors import RftbusError
from rftbus.ground.kafka.read import consume_ready
from rftbus.ground.kafka.retry import retry_kafka
from rftbus.ground.schemas import DecodeError, ExperienceGroup

log = logging.getLogger("rftbus.trainer")

LANES = ("priority", "curated", "expert")
UNKNOWN_END_S = 30.0  # a partition end that could not be read is not asked for again this long


@dataclass
class Polled:
    """One record read from a lane: the group, or why it cannot be trained (`problem`)."""

    group: ExperienceGroup | None
    lane: str
    topic: str
    partition: int
    offset: int
    raw: bytes = b""
    key: bytes | None = None
    problem: tuple[str, str] | None = None  # (reason, detail) when the record is rejected at the head


# reject(record, reason, detail, experience ids it covers)
RejectFn = Callable[[Polled, str, str, "list[str]"], None]


def polled(msg, lane: str, deserialize) -> Polled:
    """A lane's message as the trainer sees it: the group, or why it cannot be trained (`problem`)."""
    raw = msg.value() or b""
    rec = Polled(None, lane, msg.topic(), msg.partition(), msg.offset(), raw, msg.key())
    try:
        group = deserialize(raw, None)
        if not isinstance(group, ExperienceGroup):
            got = getattr(group, "SCHEMA_NAME", type(group).__name__)
            raise DecodeError("wrong_record_type", f"expected {ExperienceGroup.SCHEMA_NAME}, got {got}")
        rec.group = group
    except DecodeError as e:
        schema = e.reason in ("wrong_record_type", "unknown_schema", "no_registry")
        rec.problem = ("schema" if schema else "malformed", str(e))
    return rec


class BatchSource(Protocol):
    """What the trainer loop reads batches from: lanes of records in offset order, finished only at their
    head, whose positions (the first record not yet done, per partition) go into each checkpoint and are
    committed after it. `BatchConsumer` reads them from Kafka; tests/unit/test_trainer_loop.py from memory."""

    lanes: dict[str, deque[Polled]]

    def poll(self, timeout: float, max_messages: int = 500) -> int: ...
    def head(self, lane: str, n: int) -> list[Polled]: ...
    def waiting(self, lane: str) -> int: ...
    def finish(self, records: Iterable[Polled]) -> None: ...
    def positions(self) -> dict[tuple[str, int], int]: ...
    def lane_drained(self, lane: str) -> bool: ...
    def caught_up(self) -> bool: ...
    def commit(self, positions: dict[tuple[str, int], int], wait: bool = True) -> None: ...
    def close(self) -> None: ...


class CommitResults:
    """The consumer's `on_commit` callback (served by its polls): what became of the commits the trainer did not
    wait for. A failed one needs no retry of its own: the next checkpoint commits newer positions."""

    def __init__(self) -> None:
        self.failed = 0
        self.last_error: str | None = None

    def __call__(self, err: KafkaError | None, _partitions: list[TopicPartition]) -> None:
        if err is not None:
            self.failed += 1
            self.last_error = err.str()


class BatchConsumer:
    """Assigned partitions (p % world == rank) of each lane's topic, read from saved positions."""

    def __init__(self, consumer: Consumer, topics: dict[str, str], deserializer, positions: dict[tuple[str, int], int],
                 max_pending: int = 64):
        self.c = consumer
        self.unwaited: list[TopicPartition] | None = None  # the last commit not waited for
        self.topics = topics  # lane -> topic name
        self.lane_of = {t: lane for lane, t in topics.items()}
        self.deserialize = deserializer
        self.max_pending = max_pending
        self.read_pos: dict[tuple[str, int], int] = dict(positions)
        self.pending: dict[tuple[str, int], deque[int]] = {tp: deque() for tp in positions}  # read, not done
        self.lanes: dict[str, deque[Polled]] = {lane: deque() for lane in topics}
        self.paused: set[str] = set()
        self.end_unknown_until: dict[tuple[str, int], float] = {}  # lane_drained: ends that could not be had
        self.c.assign([TopicPartition(t, p, off) for (t, p), off in positions.items()])

    # -- reading -------------------------------------------------------------------------------
    def poll(self, timeout: float, max_messages: int = 500) -> int:
        """Read what is there (up to `timeout` for the first message); returns records taken in."""
        taken = 0
        for msg in consume_ready(self.c, max_messages, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._at_end(msg)
                    continue
                if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    raise RftbusError(f"trainer consumer: {err.str()}")
                continue  # transient; librdkafka retries
            taken += self._take(msg)
        self._flow_control()
        return taken

    def _at_end(self, msg) -> None:
        """Read up to the partition's end: what lies between the last record and it is invisible to a
        read_committed reader (a recovery fence, transaction markers), so the position moves past it and
        the lanes count as drained, the committed offset as caught up."""
        tp = (msg.topic(), msg.partition())
        if tp in self.read_pos and msg.offset() > self.read_pos[tp]:
            self.read_pos[tp] = msg.offset()

    def _take(self, msg) -> int:
        tp = (msg.topic(), msg.partition())
        if tp not in self.read_pos or msg.offset() < self.read_pos[tp]:
            return 0  # not ours, or re-delivered after a seek
        self.read_pos[tp] = msg.offset() + 1
        rec = polled(msg, self.lane_of[msg.topic()], self.deserialize)
        self.pending[tp].append(msg.offset())
        self.lanes[rec.lane].append(rec)
        return 1

    def _flow_control(self) -> None:
        """Pause a lane whose buffer reaches the cap; resume it when the trainer catches up."""
        for lane, buf in self.lanes.items():
            full = len(buf) >= self.max_pending
            tps = [TopicPartition(t, p) for (t, p) in self.read_pos if t == self.topics[lane]]
            if full and lane not in self.paused:
                self.c.pause(tps)
                self.paused.add(lane)
            elif not full and lane in self.paused:
                self.c.resume(tps)
                self.paused.discard(lane)

    # -- batching ------------------------------------------------------------------------------
    def head(self, lane: str, n: int) -> list[Polled]:
        """Up to n records at the head of `lane`, oldest first (not removed)."""
        buf = self.lanes.get(lane)
        return [] if not buf else [buf[i] for i in range(min(n, len(buf)))]

    def waiting(self, lane: str) -> int:
        return len(self.lanes.get(lane, ()))

    def finish(self, records: Iterable[Polled]) -> None:
        """Records trained or rejected: they leave their lane, and their partitions' positions move on.
        Only the head of a lane can finish (that is what keeps positions plain offsets)."""
        for r in records:
            buf = self.lanes[r.lane]
            if not buf or buf[0] is not r:
                raise RuntimeError(f"{r.topic}[{r.partition}]@{r.offset} finished out of order")
            buf.popleft()
            queue = self.pending[(r.topic, r.partition)]
            if not queue or queue[0] != r.offset:
                raise RuntimeError(f"{r.topic}[{r.partition}]@{r.offset} is not its partition's first pending record")
            queue.popleft()
        self._flow_control()

    # -- positions -----------------------------------------------------------------------------
    def positions(self) -> dict[tuple[str, int], int]:
        """Per partition, the first offset not yet trained or rejected."""
        return {tp: (q[0] if q else self.read_pos[tp]) for tp, q in self.pending.items()}

    def lane_drained(self, lane: str) -> bool:
        """Read to the last known end of every partition of `lane` (cached watermarks; a partition not fetched
        yet is asked for once). One whose end cannot be had counts as read to its end for UNKNOWN_END_S: its
        leader is frozen (the question waits 5 s) or has just moved (NOT_LEADER_FOR_PARTITION), and this is only
        which lane goes first; raised, it killed the trainer through a leader freeze and a rolling restart (#46)."""
        topic = self.topics.get(lane)
        now = time.monotonic()
        for (t, p), pos in self.read_pos.items():
            if t != topic:
                continue
            _, high = self.c.get_watermark_offsets(TopicPartition(t, p), cached=True)
            if high is None or high < 0:  # not fetched yet: ask the broker once
                if self.end_unknown_until.get((t, p), 0.0) > now:
                    continue
                try:
                    _, high = self.c.get_watermark_offsets(TopicPartition(t, p), timeout=5, cached=False)
                except KafkaException as e:
                    self.end_unknown_until[(t, p)] = now + UNKNOWN_END_S
                    log.warning("the end of %s[%d] is not known (%s): taken as read for %g s", t, p, e, UNKNOWN_END_S)
                    continue
            if pos < high:
                return False
        return True

    def caught_up(self) -> bool:
        """Every partition read to its current end (for replay's --until-end)."""
        for (t, p), pos in self.read_pos.items():
            _, high = self.c.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)
            if pos < high:
                return False
        return True

    def commit(self, positions: dict[tuple[str, int], int], wait: bool = True) -> None:
        """`wait=False` while training (Kafka's commitAsync-in-the-loop rule): a frozen group coordinator holds a
        synchronous commit for its request timeout and more, and with it the next step; the positions are in the
        checkpoint already, so a commit that fails is only late. The last one, at a stop, is waited for."""
        offs = [TopicPartition(t, p, off) for (t, p), off in positions.items() if off >= 0]
        if not offs:
            return
        if wait:
            self._commit_waited(offs, timeout_s=60.0)
            self.unwaited = None
        else:
            self.c.commit(offsets=offs, asynchronous=True)
            self.unwaited = offs

    def _commit_waited(self, offs: list[TopicPartition], timeout_s: float) -> None:
        retry_kafka(lambda: self.c.commit(offsets=offs, asynchronous=False), "committing trainer offsets", timeout_s)

    def close(self) -> None:
        """The last commit the loop did not wait for is made again, waited for (it may have failed, or still be
        on its way to a coordinator that moved); a failure here only leaves Kafka's offsets behind the checkpoint."""
        try:
            if self.unwaited:
                self._commit_waited(self.unwaited, timeout_s=30.0)
        except RftbusError as e:
            log.warning("%s; the checkpoint holds the positions (the next start resumes there)", e)
        finally:
            self.c.close()


def start_positions(consumer: Consumer, tps: list[tuple[str, int]], overrides: dict[tuple[str, int], int] | None = None,
                    timestamp_ms: int | None = None) -> dict[tuple[str, int], int]:
    """Positions without a checkpoint: explicit offsets, else a timestamp, else committed, else the start."""
    def watermarks(topic: str, p: int) -> tuple[int, int]:
        return retry_kafka(lambda: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10),
                           f"reading the offsets of {topic}[{p}]")

    out: dict[tuple[str, int], int] = {}
    if timestamp_ms is not None:
        found = consumer.offsets_for_times([TopicPartition(t, p, timestamp_ms) for t, p in tps], timeout=15)
        for tp in found:
            if tp.offset < 0:  # nothing at or after the timestamp: start at the end
                tp.offset = watermarks(tp.topic, tp.partition)[1]
            out[(tp.topic, tp.partition)] = tp.offset
    else:
        committed = retry_kafka(lambda: consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=15),
                                "reading the trainer group's committed offsets")
        for tp in committed:
            low = watermarks(tp.topic, tp.partition)[0]
            out[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else max(low, 0)
    for key, off in (overrides or {}).items():
        if key in out:
            out[key] = off
    return out


__all__ = ["BatchConsumer", "LANES", "Polled", "retry_kafka", "start_positions"]
