"""The trainer's batch consumer: whole groups from the curated lanes (priority first) and expert.

Offsets are never trusted to Kafka alone. Each partition's position is tracked as (offset, skip):
`offset` is the lowest offset not yet trained or rejected, `skip` the offsets above it that already
were (groups interleave inside a partition, so "done" is not a prefix). The trainer saves these
positions inside each checkpoint and seeks to them on restart, which is what makes training
exactly-once in the model's lineage; Kafka's committed offset (`offset`) is for lag and admission.

A unit is what a batch counts: a GRPO group (complete when metadata["group_survivors"] of its
experiences have arrived), a DPO pair (2 experiences sharing metadata["preference_pair"]), or one
expert experience. Undecodable records are handed to `reject` and never stop the consumer.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from rftbus.errors import RftbusError
from rftbus.kafka.read import consume_ready
from rftbus.schemas import DecodeError, Experience

LANES = ("priority", "curated", "expert")


@dataclass
class Polled:
    """One decoded experience and where it was read."""

    exp: Experience
    lane: str
    topic: str
    partition: int
    offset: int
    raw: bytes = b""
    key: bytes | None = None


@dataclass
class Unit:
    key: str
    lane: str
    expected: int
    records: list[Polled] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.records) >= self.expected


@dataclass
class Position:
    offset: int
    skip: set[int] = field(default_factory=set)

    def to_json(self) -> dict:
        return {"offset": self.offset, "skip": sorted(self.skip)}

    @classmethod
    def from_json(cls, d: dict) -> Position:
        return cls(int(d["offset"]), set(int(x) for x in d.get("skip", [])))


class _Partition:
    """Read position, offsets read but not yet done, and done offsets above the lowest pending one."""

    def __init__(self, start: Position):
        self.read_pos = start.offset
        self.skip = set(start.skip)
        self.pending: set[int] = set()
        self.done: set[int] = set()

    def position(self) -> Position:
        low = min(self.pending) if self.pending else self.read_pos
        skip = {o for o in self.done | self.skip if o >= low}
        return Position(low, skip)


class InvalidExperience(RftbusError):
    pass


def validate(exp: Experience) -> None:
    """The few checks the trainer cannot do without (streams verify the rest)."""
    n = len(exp.response_ids)
    if len(exp.logprobs) != n or len(exp.loss_mask) != n:
        raise InvalidExperience(f"length_mismatch: {n} response tokens, {len(exp.logprobs)} logprobs, "
                                f"{len(exp.loss_mask)} mask entries")
    if not exp.prompt_ids:
        raise InvalidExperience("length_mismatch: empty prompt")


def unit_of(exp: Experience, lane: str, pairs: bool) -> tuple[str, int]:
    """(unit key, experiences that make it whole)."""
    if lane == "expert":
        return f"x:{exp.experience_id}", 1
    if pairs and "preference_pair" in exp.metadata:
        return f"p:{exp.metadata['preference_pair']}", 2
    try:
        survivors = int(exp.metadata.get("group_survivors", "1"))
    except ValueError:
        survivors = 1
    return f"g:{exp.group_id}", max(survivors, 1)


# reject(topic, partition, offset, key, original bytes, reason, detail, experience_id)
RejectFn = Callable[[str, int, int, "bytes | None", bytes, str, str, "str | None"], None]


class BatchConsumer:
    """Assigned partitions (p % world == rank) of each lane's topic, read from saved positions."""

    def __init__(self, consumer: Consumer, topics: dict[str, str], deserializer, reject: RejectFn,
                 positions: dict[tuple[str, int], Position], pairs: bool = False, max_pending: int = 64):
        self.c = consumer
        self.topics = topics  # lane -> topic name
        self.lane_of = {t: lane for lane, t in topics.items()}
        self.deserialize = deserializer
        self.reject = reject
        self.pairs = pairs
        self.max_pending = max_pending
        self.parts: dict[tuple[str, int], _Partition] = {tp: _Partition(p) for tp, p in positions.items()}
        self.units: dict[str, OrderedDict[str, Unit]] = {lane: OrderedDict() for lane in topics}
        self.paused: set[str] = set()
        self.c.assign([TopicPartition(t, p, pos.offset) for (t, p), pos in positions.items()])

    # -- reading -------------------------------------------------------------------------------
    def poll(self, timeout: float, max_messages: int = 500) -> int:
        """Read what is there (up to `timeout` for the first message); returns records taken in."""
        msgs = consume_ready(self.c, max_messages, timeout)
        taken = 0
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    raise RftbusError(f"trainer consumer: {err.str()}")
                continue  # transient; librdkafka retries
            taken += self._take(msg)
        self._flow_control()
        return taken

    def _take(self, msg) -> int:
        tp = (msg.topic(), msg.partition())
        part = self.parts.get(tp)
        if part is None:
            return 0
        offset = msg.offset()
        part.read_pos = max(part.read_pos, offset + 1)
        if offset in part.skip:  # trained or rejected before the restart
            part.skip.discard(offset)
            part.done.add(offset)
            return 0
        lane = self.lane_of[msg.topic()]
        raw = msg.value() or b""
        key = msg.key()
        try:
            exp = self.deserialize(raw, None)
            if not isinstance(exp, Experience):
                raise DecodeError("schema", f"expected rftbus.Experience, got {getattr(exp, 'SCHEMA_NAME', type(exp).__name__)}")
            validate(exp)
        except DecodeError as e:
            schema = e.reason in ("schema", "wrong_record_type", "unknown_schema")
            self._reject_raw(tp, offset, raw, key, "schema" if schema else "malformed", str(e))
            return 0
        except InvalidExperience as e:
            reason, _, detail = str(e).partition(": ")
            self._reject_raw(tp, offset, raw, key, reason, detail, exp.experience_id)
            return 0
        part.pending.add(offset)
        ukey, expected = unit_of(exp, lane, self.pairs)
        lane_units = self.units[lane]
        unit = lane_units.get(ukey)
        if unit is None:
            unit = lane_units[ukey] = Unit(ukey, lane, expected)
        unit.records.append(Polled(exp, lane, msg.topic(), msg.partition(), offset, raw, key))
        return 1

    def _reject_raw(self, tp, offset, raw, key, reason, detail, experience_id=None) -> None:
        self.reject(tp[0], tp[1], offset, key, raw, reason, detail, experience_id)
        self.parts[tp].done.add(offset)

    def _flow_control(self) -> None:
        """Pause a lane whose buffered units reach the cap; resume it when the trainer catches up."""
        for lane, units in self.units.items():
            full = len(units) >= self.max_pending
            tps = [TopicPartition(t, p) for (t, p) in self.parts if t == self.topics[lane]]
            if full and lane not in self.paused:
                self.c.pause(tps)
                self.paused.add(lane)
            elif not full and lane in self.paused:
                self.c.resume(tps)
                self.paused.discard(lane)

    # -- batching ------------------------------------------------------------------------------
    def complete_units(self, lanes: Iterable[str]) -> list[Unit]:
        """Whole units in lane order (priority before curated), oldest first within a lane."""
        return [u for lane in lanes if lane in self.units for u in self.units[lane].values() if u.complete]

    def finish(self, polled: Iterable[Polled]) -> None:
        """Mark experiences trained or rejected: they leave the buffer and count as done."""
        for p in polled:
            part = self.parts[(p.topic, p.partition)]
            part.pending.discard(p.offset)
            part.done.add(p.offset)
            unit_key, _ = unit_of(p.exp, p.lane, self.pairs)
            unit = self.units[p.lane].get(unit_key)
            if unit is not None:
                unit.records = [r for r in unit.records if r.offset != p.offset or r.topic != p.topic]
                if not unit.records:
                    del self.units[p.lane][unit_key]
        self._flow_control()

    def drop_unit(self, unit: Unit) -> None:
        self.units[unit.lane].pop(unit.key, None)

    # -- positions -----------------------------------------------------------------------------
    def positions(self) -> dict[tuple[str, int], Position]:
        out = {}
        for tp, part in self.parts.items():
            pos = part.position()
            part.done = {o for o in part.done if o >= pos.offset}
            out[tp] = pos
        return out

    def lane_drained(self, lane: str) -> bool:
        """Read to the last known end of every partition of `lane` (cached watermarks, no request)."""
        topic = self.topics.get(lane)
        for (t, p), part in self.parts.items():
            if t != topic:
                continue
            _, high = self.c.get_watermark_offsets(TopicPartition(t, p), cached=True)
            if high is None or high < 0:  # not fetched yet: ask the broker once
                _, high = self.c.get_watermark_offsets(TopicPartition(t, p), timeout=5, cached=False)
            if part.read_pos < high:
                return False
        return True

    def caught_up(self) -> bool:
        """Every partition read to its current end (for replay's --until-end)."""
        for (t, p), part in self.parts.items():
            _, high = self.c.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)
            if part.read_pos < high:
                return False
        return True

    def commit(self, positions: dict[tuple[str, int], Position]) -> None:
        offs = [TopicPartition(t, p, pos.offset) for (t, p), pos in positions.items() if pos.offset >= 0]
        if offs:
            retry_kafka(lambda: self.c.commit(offsets=offs, asynchronous=False), "committing trainer offsets")

    def close(self) -> None:
        self.c.close()


def retry_kafka(fn, what: str, timeout_s: float = 60.0):
    """Run `fn`, retrying retriable Kafka errors (a fresh broker answers NOT_COORDINATOR for a while)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            retriable = err is not None and hasattr(err, "retriable") and (err.retriable() or err.code() in (
                KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT))
            if not retriable or time.monotonic() > deadline:
                raise RftbusError(f"{what}: {err.str() if err is not None else e}") from None
            time.sleep(0.5)


def start_positions(consumer: Consumer, tps: list[tuple[str, int]], overrides: dict[tuple[str, int], int] | None = None,
                    timestamp_ms: int | None = None) -> dict[tuple[str, int], Position]:
    """Positions without a checkpoint: explicit offsets, else a timestamp, else committed, else the start."""
    out: dict[tuple[str, int], Position] = {}
    if timestamp_ms is not None:
        found = consumer.offsets_for_times([TopicPartition(t, p, timestamp_ms) for t, p in tps], timeout=15)
        for tp in found:
            if tp.offset < 0:  # nothing at or after the timestamp: start at the end
                tp.offset = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[1]
            out[(tp.topic, tp.partition)] = Position(tp.offset)
    else:
        committed = retry_kafka(lambda: consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=15),
                                "reading the trainer group's committed offsets")
        for tp in committed:
            low = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[0]
            out[(tp.topic, tp.partition)] = Position(tp.offset if tp.offset >= 0 else max(low, 0))
    for tp, off in (overrides or {}).items():
        if tp in out:
            out[tp] = Position(off)
    return out


__all__ = ["BatchConsumer", "LANES", "Polled", "Position", "Unit", "retry_kafka", "start_positions"]
