"""Join feedback: live experiences without a reward wait in a table until their Feedback arrives.

Co-partitioning: raw is keyed by group_id and written by librdkafka's partitioner, rft.feedback is keyed
by experience_id. Both are repartitioned by the workers into one internal topic `<app_id>-join` keyed
by experience_id (kind header exp | fb), so an experience and its feedback meet in one partition and
one table (`pending`, changelogged, keyed by experience_id) no matter which arrives first. The joined
experience goes on to `<app_id>-joined`, into the same partition number its raw record had, so it
meets the rest of its group in the ingest agent (a preference pair goes to partition crc32(pair) mod n).
"""

from __future__ import annotations

import struct
import time
import zlib
from dataclasses import dataclass

from rftbus.schemas import DecodeError, Experience, Feedback
from rftbus.streams.feedback import BadFeedback, apply_grade, grades
from rftbus.streams.outputs import H_KIND, H_SRC, H_T0, split_src

EXP, FB, DONE = 1, 2, 3
_HEAD = struct.Struct(">Bqi")


@dataclass(slots=True)
class Held:
    kind: int
    arrived_ms: int
    partition: int
    src: str = ""  # the record it came from (raw record for EXP, feedback record for FB)
    extra: bytes = b""  # EXP: the raw record's timestamp header (latency accounting)
    data: bytes = b""


def pack(h: Held) -> bytes:
    src = h.src.encode()
    return (_HEAD.pack(h.kind, h.arrived_ms, h.partition) + struct.pack(">HH", len(src), len(h.extra))
            + src + h.extra + h.data)


def unpack(b: bytes) -> Held:
    kind, ms, part = _HEAD.unpack_from(b)
    ls, lk = struct.unpack_from(">HH", b, _HEAD.size)
    o = _HEAD.size + 4
    return Held(kind, ms, part, b[o:o + ls].decode(), b[o + ls:o + ls + lk], b[o + ls + lk:])


def current_partition() -> int:
    from faust.streams import current_event

    return current_event().message.partition


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Join:
    """Handlers for the join agent; `emit` is the Emitter, `table` the Faust table `pending`."""

    def __init__(self, cfg, table, emit, codec, counters, joined_partitions: int):
        self.cfg = cfg
        self.table = table
        self.emit = emit
        self.encode = codec.encode
        self.decode = codec.decode
        self.counters = counters
        self.joined_partitions = joined_partitions

    async def handle(self, event) -> None:
        msg = event.message
        headers = dict(msg.headers or [])
        kind = headers.get(H_KIND)
        if kind == b"tick":
            await self.expire(msg.partition)
            return
        key = msg.key  # table keys are bytes (what the raw serializer gives back on recovery)
        exp_id = key.decode()
        raw = self.table.get(key)
        held = unpack(raw) if raw is not None else None
        src = headers[H_SRC].decode()
        if kind == b"exp":
            arrived = Held(EXP, now_ms(), msg.partition, src, headers.get(H_T0, b""), msg.value)
            if held is not None and held.kind == FB:
                await self._apply(exp_id, arrived, held.data)
            elif held is None or held.kind == EXP:  # (a replay of the same record overwrites it)
                self.table[key] = pack(arrived)
        elif kind == b"fb":
            self.counters.inc("feedback_routed")
            if held is not None and held.kind == EXP:
                await self._apply(exp_id, held, msg.value)
            elif held is not None and held.kind == DONE:
                self.counters.inc("feedback_late")
            else:
                self.table[key] = pack(Held(FB, now_ms(), msg.partition, src, b"", msg.value))

    async def _apply(self, exp_id: str, exp_held: Held, fb_bytes: bytes) -> None:
        e: Experience = self.decode(exp_held.data)
        fb: Feedback = self.decode(fb_bytes)
        grade = next(g for g in grades(fb, tuple(self.cfg.streams.rating_scale)) if g.experience_id == exp_id)
        e = apply_grade(e, grade)
        if grade.pair_id is not None:
            part = zlib.crc32(grade.pair_id.encode()) % self.joined_partitions
        else:
            part = split_src(exp_held.src)[1] % self.joined_partitions
        headers = [(H_SRC, exp_held.src.encode())]
        if exp_held.extra:
            headers.append((H_T0, exp_held.extra))
        await self.emit.topics["joined"].send(key=e.group_id.encode(), value=self.encode(e), partition=part,
                                              headers=headers)
        self.table[exp_id.encode()] = pack(Held(DONE, now_ms(), current_partition()))
        self.counters.inc("joined")

    async def expire(self, partition: int) -> None:
        ttl_ms = self.cfg.streams.feedback_ttl_s * 1000
        cutoff = now_ms() - ttl_ms
        for key, raw in list(self.table.items()):
            h = unpack(raw)
            exp_id = key.decode()
            if h.partition != partition or h.arrived_ms >= cutoff:
                continue
            if h.kind == EXP:
                await self.emit.reject(reason="no_feedback", detail=f"no feedback within {self.cfg.streams.feedback_ttl_s:g} s",
                                       stage="join", src=h.src, original=h.data, key=None, p=partition,
                                       experience_id=exp_id)
                self.counters.reject("no_feedback", "join")
            elif h.kind == FB:
                await self.emit.reject(reason="orphan_feedback", detail="feedback for an experience that never "
                                       "arrived", stage="feedback", src=h.src, original=h.data, key=None, p=partition,
                                       experience_id=exp_id)
                self.counters.reject("orphan_feedback", "feedback")
            del self.table[key]

    def pending(self) -> int:
        return sum(1 for raw in self.table.values() if raw[0] == EXP)


class FeedbackFanout:
    """rft.feedback -> `<app_id>-join`, one message per experience the feedback grades."""

    def __init__(self, cfg, emit, codec, counters):
        self.cfg = cfg
        self.emit = emit
        self.decode = codec.decode
        self.counters = counters

    async def handle(self, event) -> None:
        msg = event.message
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        self.counters.inc("feedback_in")
        try:
            fb = self.decode(msg.value)
            if fb is None:  # the codec passes tombstones through as None
                raise DecodeError("empty", "null value (tombstone) on the feedback topic")
            if not isinstance(fb, Feedback):
                raise DecodeError("wrong_record_type", f"expected rftbus.Feedback, got {type(fb).SCHEMA_NAME}")
            gs = grades(fb, tuple(self.cfg.streams.rating_scale))
        except DecodeError as e:
            reason = "schema" if e.reason in ("unknown_schema", "no_registry", "wrong_record_type") else "malformed"
            await self._reject(reason, f"{e.reason}: {e.detail}", src, msg)
            return
        except BadFeedback as e:
            await self._reject("bad_feedback", str(e), src, msg)
            return
        for g in gs:
            await self.emit.topics["join"].send(key=g.experience_id.encode(), value=msg.value,
                                                headers=[(H_KIND, b"fb"), (H_SRC, src.encode())])

    async def _reject(self, reason: str, detail: str, src: str, msg) -> None:
        self.counters.reject(reason, "feedback")
        await self.emit.reject(reason=reason, detail=detail, stage="feedback", src=src, original=msg.value,
                               key=msg.key, p=msg.partition)
