"""Join feedback to live experiences by experience id: the first hop of the feedback join.

Feedback is keyed by experience_id, a live group by group_id, so they cannot meet by key. When the
ingest agent holds a live group (live.py), it sends one small index record per sample still waiting
for its reward to the internal topic `<app_id>-join`, keyed by experience_id (kind `exp`: group id,
raw partition, sample index). The feedback fan-out sends every Feedback there too, once per experience
it grades (kind `fb`). Both meet in one partition and one changelogged table (`pending`, keyed by
experience_id) whatever the arrival order. When they do, the grade goes to `<app_id>-joined` into the
partition number the group's raw record had, where the ingest agent holds the group (kind `grade`).

After the join an entry stays one more TTL as a marker, so feedback that comes after it gets a reason:
DONE (graded: another feedback is `duplicate_feedback`, a retry with the same feedback_id is nothing)
or EXPIRED (the TTL passed ungraded and the sample was rejected `no_feedback`: `feedback_expired`).
State lives in the changelogged table (on disk with `streams.table_store: rocksdb`), not in the worker.
"""

from __future__ import annotations

import struct
import time

from typing import Any

from rftbus.ground.schemas import DecodeError, Feedback
from rftbus.ground.schemas.bounds import MAX_ID
from rftbus.streams.checkpoint.landed import Landed, done_key
from rftbus.ground.grades.rules import BadFeedback, grades
from rftbus.streams.outputs import H_EXP, H_FBID, H_IN, H_K, H_KIND, H_N, H_RESEND, H_SAMPLE, H_SRC, H_T0

EXP, FB, DONE, EXPIRED = 1, 2, 3, 4
_HEAD = struct.Struct(">Bqi")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pack(kind: int, arrived_ms: int, partition: int, src: str = "", data: bytes = b"") -> bytes:
    s = src.encode()
    return _HEAD.pack(kind, arrived_ms, partition) + struct.pack(">H", len(s)) + s + data


def unpack(b: bytes) -> tuple[int, int, int, str, bytes]:
    """(kind, arrived_ms, join partition, src, data)."""
    kind, ms, part = _HEAD.unpack_from(b)
    (ls,) = struct.unpack_from(">H", b, _HEAD.size)
    o = _HEAD.size + 2
    return kind, ms, part, b[o:o + ls].decode(), b[o + ls:]


class ScanClock:
    """When a full scan of a table is due again: every tick, or every 1/60 of the feedback TTL when that
    is longer (an hour's TTL is checked every minute, not every second, over a table holding an hour of
    traffic, on disk with rocksdb). Expiry is that much late, never early."""

    def __init__(self, sc):
        self.period = max(sc.tick_interval_s, sc.feedback_ttl_s / 60)
        self.last: dict[object, float] = {}

    def due(self, key: object = None) -> bool:
        now = time.monotonic()
        if now - self.last.get(key, float("-inf")) < self.period:
            return False
        self.last[key] = now
        return True


def pack_fb(fb_id: bytes, t0: bytes, feedback: bytes) -> bytes:
    """A waiting feedback: its id and accepted-at (ms) beside the record, for when its experience comes."""
    return struct.pack(">HH", len(fb_id), len(t0)) + fb_id + t0 + feedback


def unpack_fb(b: bytes) -> tuple[bytes, bytes, bytes]:
    n, m = struct.unpack_from(">HH", b)
    return b[4:4 + n], b[4 + n:4 + n + m], b[4 + n + m:]


def pack_done(fb_id: bytes, index: bytes) -> bytes:
    """A DONE marker's data: the feedback that graded it and its index (to send the grade again)."""
    return struct.pack(">H", len(fb_id)) + fb_id + index


def unpack_done(b: bytes) -> tuple[bytes, bytes]:
    (n,) = struct.unpack_from(">H", b)
    return b[2:2 + n], b[2 + n:]


def index_value(group_id: str, raw_partition: int, sample: int) -> bytes:
    """What an `exp` index record carries: where its group is held."""
    return f"{group_id}\x00{raw_partition}\x00{sample}".encode()


def parse_index(b: bytes) -> tuple[str, int, int]:
    gid, part, sample = b.decode().split("\x00")
    return gid, int(part), int(sample)


class Join:
    """Handlers for the join agent; `emit` is the Emitter, `table` the Faust table `pending`."""

    def __init__(self, cfg, table, emit, counters, joined_partitions: int):
        self.cfg = cfg
        self.table = table
        self.emit = emit
        self.counters = counters
        self.joined_partitions = joined_partitions
        self.scans = ScanClock(cfg.streams)  # per partition
        self.checkpoint: Any = None  # what already went out, what may be committed (set by the app)

    async def handle(self, event) -> None:
        msg = event.message
        landed = await self.checkpoint.begin(msg)
        headers = dict(msg.headers or [])
        kind = headers.get(H_KIND)
        if kind == b"tick":
            await self.expire(msg.partition, landed)
            return
        key = msg.key  # table keys are bytes (what the raw serializer gives back on recovery)
        raw = self.table.get(key)
        held = unpack(raw) if raw is not None else None
        src = headers[H_SRC].decode()
        if kind == b"exp":
            if held is not None and held[0] == FB:
                fb_id, t0, fb = unpack_fb(held[4])
                await self._grade(key, msg.value, fb, held[3], fb_id, t0, landed)
            elif held is None:  # (a replay or a resend of an index already here keeps its first arrival)
                self.table[key] = pack(EXP, now_ms(), msg.partition, src, msg.value)
        elif kind == b"fb":
            self.counters.inc("feedback_routed")
            fb_id, t0 = headers.get(H_FBID, b""), headers.get(H_T0, b"")
            if held is None:
                self.table[key] = pack(FB, now_ms(), msg.partition, src, pack_fb(fb_id, t0, msg.value))
            elif held[0] == EXP:
                await self._grade(key, held[4], msg.value, src, fb_id, t0, landed)
            elif held[0] in (FB, DONE):  # it already has a feedback (waiting for it, or applied): the first is kept
                first, index = (unpack_fb(held[4])[0], b"") if held[0] == FB else unpack_done(held[4])
                if fb_id and first == fb_id:
                    self.counters.inc("feedback_retries")  # the same feedback again: one feedback downstream
                    if held[0] == DONE and index:
                        # a DONE marker from a changelog record older than the input header (rftbus/streams/state.py:
                        # always recovered) may have outlived its grade at a kill -9: the grade again (the held
                        # group keeps a sample's first grade and ignores a resent one once released)
                        await self._send_grade(key, index, msg.value, src, t0, resend=True)
                else:
                    # one text whether the first grade is still waiting for its experience or already joined: which
                    # of the two it is depends on how the index record and the grades interleaved in this partition
                    await self._late("duplicate_feedback", f"experience {key.decode()} already has feedback "
                                     f"{first.decode() or '?'}", src, msg, landed)
            else:  # EXPIRED
                ttl = self.cfg.streams.feedback_ttl_s
                await self._late("feedback_expired", f"experience {key.decode()} waited its feedback_ttl_s of "
                                 f"{ttl:g} s ungraded (rejected no_feedback); this came "
                                 f"{(now_ms() - held[1]) / 1000 + ttl:.0f} s after it arrived", src, msg, landed)

    async def _grade(self, key: bytes, index: bytes, feedback: bytes, fb_src: str, fb_id: bytes, t0: bytes,
                     landed: Landed) -> None:
        """The grade out once: a replay (the table is recovered as of the committed join offsets, rftbus/streams/state.py)
        finds a grade that landed before a kill in the joined topic and sends nothing."""
        ident = done_key(fb_src, key.decode(errors="replace"))
        if ident in landed.done:
            self.counters.inc("replays_skipped")
        else:
            await self._send_grade(key, index, feedback, fb_src, t0)
            landed.finished(ident)
        self.table[key] = pack(DONE, now_ms(), _current_partition(), data=pack_done(fb_id, index))
        self.counters.inc("joined")

    async def _send_grade(self, key: bytes, index: bytes, feedback: bytes, fb_src: str, t0: bytes,
                          resend: bool = False) -> None:
        gid, raw_partition, sample = parse_index(index)
        await self.emit.send("joined", gid.encode(), feedback, raw_partition % self.joined_partitions,
                             [(H_KIND, b"grade"), (H_EXP, key), (H_SAMPLE, str(sample).encode()),
                              (H_SRC, fb_src.encode()), (H_T0, t0),  # what the join's recovery scan reads:
                              (H_IN, str(_current_partition()).encode()), (H_N, b"1"), (H_K, b"0")]
                             + ([(H_RESEND, b"1")] if resend else []), fb_src)

    async def _late(self, reason: str, detail: str, src: str, msg, landed: Landed) -> None:
        """Feedback that grades nothing: its own rejection, so a grader's work is never dropped silently."""
        await self._reject(reason, detail, "feedback", src, msg.value, msg.key, msg.partition, landed)

    async def _reject(self, reason: str, detail: str, stage: str, src: str, original: bytes | None, key: bytes,
                      p: int, landed: Landed) -> None:
        """One rejection per (feedback record, experience): a replay (the fan-out forwards a feedback again after
        a restart, or the join record itself is read again) finds it in the log and writes nothing."""
        eid = key.decode(errors="replace")
        ident = done_key(src, eid)
        if ident in landed.done:
            self.counters.inc("replays_skipped")
            return
        self.counters.reject(reason, stage)
        await self.emit.reject(reason=reason, detail=detail, stage=stage, src=src, original=original, key=key, p=p,
                               exp=eid)
        landed.finished(ident)

    async def expire(self, partition: int, landed: Landed) -> None:
        """Index entries past the feedback TTL become EXPIRED markers (the ingest side rejects their
        samples); markers past one more TTL are forgotten; feedback that never found its experience is
        rejected as orphan_feedback. A scan reads the whole table, so it runs when `ScanClock` says."""
        if not self.scans.due(partition):
            return
        now = now_ms()
        cutoff = now - self.cfg.streams.feedback_ttl_s * 1000
        due = []  # (only those: a week's table is too big to copy)
        for key, raw in self.table.items():
            kind, arrived, part, src, data = unpack(raw)
            if part == partition and arrived < cutoff:
                due.append((key, kind, part, src, data))
        for key, kind, part, src, data in due:
            if kind == FB:
                await self._reject("orphan_feedback", "feedback for an experience that never arrived", "feedback",
                                   src, unpack_fb(data)[2], key, partition, landed)
            if kind == EXP:
                self.table[key] = pack(EXPIRED, now, part)
            else:
                del self.table[key]

    def pending(self) -> tuple[int, int]:
        """(experiences waiting for their feedback, feedback waiting for its experience) in one scan of the table:
        the second is rejected as orphan_feedback at the TTL, so a drained worker has settled only when both are 0."""
        exp = fb = 0
        for raw in self.table.values():
            exp += raw[0] == EXP
            fb += raw[0] == FB
        return exp, fb

    async def on_error(self, event, exc: BaseException) -> None:
        """A join record that raised: a `processing_error` rejection naming the input it came from."""
        msg = event.message
        src = dict(msg.headers or []).get(H_SRC, b"").decode() or f"{msg.topic}/{msg.partition}/{msg.offset}"
        landed = self.checkpoint.landed_of(msg.topic, msg.partition) or Landed.empty(self.cfg)
        await self._reject("processing_error", f"{type(exc).__name__}: {exc}", "join", src, msg.value,
                           msg.key or b"", msg.partition, landed)


def _current_partition() -> int:
    from faust.streams import current_event

    event = current_event()
    assert event is not None  # (called from the join agent, inside its event)
    return event.message.partition


JOIN_HEADROOM = 64 * 1024  # a forwarded feedback's key (an experience id) and headers


class FeedbackFanout:
    """rft.feedback -> `<app_id>-join`, one message per experience the feedback grades."""

    def __init__(self, cfg, emit, codec, counters):
        self.cfg = cfg
        self.emit = emit
        self.decode = codec.decode
        self.counters = counters
        self.checkpoint: Any = None  # what already went out, what may be committed (set by the app)

    async def handle(self, event) -> None:
        msg = event.message
        await self.checkpoint.begin(msg)
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        self.counters.inc("feedback_in")
        limit = min(self.cfg.streams.max_message_bytes, self.emit.max_bytes.get("join", 1 << 62) - JOIN_HEADROOM)
        if msg.value is not None and len(msg.value) > limit:  # it could not be forwarded to the join whole
            await self._reject("too_large", f"{len(msg.value)} bytes > {limit} (streams.max_message_bytes, "
                               "and the join topic's limit less its headers)", src, msg)
            return
        try:
            fb = self.decode(msg.value)
            if fb is None:  # the codec passes tombstones through as None
                raise DecodeError("empty", "null value (tombstone) on the feedback topic")
            if not isinstance(fb, Feedback):
                raise DecodeError("wrong_record_type", f"expected rftbus.Feedback, got {type(fb).SCHEMA_NAME}")
            gs = grades(fb, tuple(self.cfg.streams.rating_scale))
            long = [g.experience_id for g in gs if len(g.experience_id.encode()) > MAX_ID]
            if long:  # (the join is keyed by it: a key that size could not be written, nor match an experience)
                raise BadFeedback(f"experience id of {len(long[0].encode())} bytes (ids are at most {MAX_ID})")
        except DecodeError as e:
            reason = "schema" if e.reason in ("unknown_schema", "no_registry", "wrong_record_type") else "malformed"
            await self._reject(reason, f"{e.reason}: {e.detail}", src, msg)
            return
        except BadFeedback as e:
            await self._reject("bad_feedback", str(e), src, msg)
            return
        t0 = str(int(msg.timestamp * 1000) if msg.timestamp else now_ms()).encode()  # when the broker took it
        for g in gs:
            key = g.experience_id.encode()
            await self.emit.send("join", key, msg.value, self.emit.key_partition("join", key), [
                (H_KIND, b"fb"), (H_SRC, src.encode()), (H_FBID, fb.feedback_id.encode()), (H_T0, t0)], src)

    async def on_error(self, event, exc: BaseException) -> None:
        """A feedback record that raised: a `processing_error` rejection, never an acknowledgement alone."""
        msg = event.message
        await self._reject("processing_error", f"{type(exc).__name__}: {exc}",
                           f"{msg.topic}/{msg.partition}/{msg.offset}", msg)

    async def _reject(self, reason: str, detail: str, src: str, msg) -> None:
        """The feedback record's one outcome; a replay finds it in the log and writes nothing."""
        landed = self.checkpoint.landed_of(msg.topic, msg.partition) or Landed.empty(self.cfg)
        if src in landed.done:
            self.counters.inc("replays_skipped")
            return
        self.counters.reject(reason, "feedback")
        await self.emit.reject(reason=reason, detail=detail, stage="feedback", src=src, original=msg.value,
                               key=msg.key, p=msg.partition)
        landed.finished(src)
