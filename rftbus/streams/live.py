"""Live groups waiting for feedback: the second hop of the feedback join, in the ingest agent.

A live group (source=live, a reward still null) is held in the changelogged table `live`, keyed by
group_id, in the partition its raw record came from; one index record per waiting sample goes to the
join (join.py). Grades come back on `<app_id>-joined` into that same partition (raw and joined are
co-partitioned in the ingest agent). When every waiting sample is graded, or the feedback TTL passes,
the group is released with the rewards it has (ungraded samples are then dropped as `no_feedback`) and
goes on like any raw group. A released group stays as a small DONE marker for the TTL, so a replay of
its raw record or a late grade does nothing.

A grade can also come before its group: after a kill -9 the table is recovered as of the committed inputs
(rftbus/streams/state.py), so a hold whose raw record is read again is not in it, while the grade the join made from its
index records is already on `joined`, and the restarted agent may read joined before raw. Such a grade waits as an
EARLY entry (with the feedback record it came from); the group's hold takes it, and at the TTL a grade whose group
never came is rejected `feedback_expired`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from rftbus.ground.schemas import DecodeError, ExperienceGroup, Feedback, topic_context
from rftbus.ground.grades.rules import apply_grade, grades
from rftbus.streams.headers import H_HELD
from rftbus.streams.join import index_value, now_ms
from rftbus.streams.outputs import H_KIND, H_SRC
from rftbus.ground.schemas.view import GroupView

WAITING, DONE, EARLY = 1, 2, 3


class Late(Exception):
    """A grade for a group no longer held."""


@dataclass(slots=True)
class Held:
    state: int
    arrived_ms: int
    partition: int
    src: str = ""  # the raw record
    t0: bytes = b""  # its timestamp header (latency accounting)
    data: bytes = b""  # the group as read
    grades: dict[int, bytes] = field(default_factory=dict)  # sample index -> Feedback bytes (EARLY: `early` bytes)


@dataclass(slots=True)
class EarlyGrade:
    """A grade that came before its group: the feedback record (`src`), the experience and the Feedback bytes;
    `resend`: the join sent it again after a crash (the first may have landed: never rejected on its own)."""
    src: str
    experience: bytes
    feedback: bytes
    resend: bool = False


def _parts(*items: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(x)) + x for x in items)


def _unparts(b: bytes, pos: int) -> list[bytes]:
    out = []
    while pos < len(b):
        (n,) = struct.unpack_from(">I", b, pos)
        out.append(b[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


def pack(h: Held) -> bytes:
    grades_ = [x for i, fb in sorted(h.grades.items()) for x in (str(i).encode(), fb)]
    return struct.pack(">Bqi", h.state, h.arrived_ms, h.partition) + _parts(h.src.encode(), h.t0, h.data, *grades_)


def unpack(b: bytes) -> Held:
    state, ms, part = struct.unpack_from(">Bqi", b)
    src, t0, data, *rest = _unparts(b, 13)
    return Held(state, ms, part, src.decode(), t0, data, {int(rest[k]): rest[k + 1] for k in range(0, len(rest), 2)})


def early(g: EarlyGrade) -> bytes:
    return _parts(g.src.encode(), g.experience, g.feedback, b"1" if g.resend else b"")


def unearly(b: bytes) -> EarlyGrade:
    src, exp, fb, resend = _unparts(b, 0)
    return EarlyGrade(src.decode(), exp, fb, resend == b"1")


def published(value: bytes | None) -> list[tuple[str, bytes]]:
    """The headers a change of the live table publishes (rftbus/streams/published.py): its raw record while it waits."""
    if not value or value[0] != WAITING:
        return []
    (n,) = struct.unpack_from(">I", value, 13)  # (the first part after the fixed head: src)
    return [(H_HELD, value[17:17 + n])]


class LiveGroups:
    """`table` is the Faust table `live`; `emit` the Emitter; `codec` decodes Feedback and groups."""

    def __init__(self, cfg, table, emit, codec, counters):
        self.cfg = cfg
        self.table = table
        self.emit = emit
        self.codec = codec
        self.counters = counters

    async def hold(self, g: GroupView, src: str, p: int, t0: bytes | None) -> tuple[bool, Held | None]:
        """Hold a group for its feedback: (whether it is newly held, the group when the grades that came before
        it already complete it: to be released now). Not new when it is already held or released (a replay).

        A replay of a group still waiting sends its index records again: a kill -9 can land the table's
        changelog write and lose the index sends buffered after it, and without them its feedback would
        never meet it (the join keeps the first arrival of an index, so a resend does not extend the TTL)."""
        key = g.group_id.encode()
        raw = self.table.get(key)
        grades: dict[int, bytes] = {}
        if raw is not None and raw[0] == EARLY:
            grades = {i: unearly(b).feedback for i, b in unpack(raw).grades.items()}
            self.counters.inc("grades_before_group", len(grades))
        elif raw is not None:
            if raw[0] == WAITING:
                self.counters.inc("index_resent", await self._index(g, src, p, skip=unpack(raw).grades))
            return False, None
        h = Held(WAITING, now_ms(), p, src, t0 or b"", g.data, grades)
        if grades and len(grades) >= self._waiting(h):
            return True, h
        self.table[key] = pack(h)
        await self._index(g, src, p, skip=grades)
        return True, None

    def holds(self, group_id: str, src: str) -> bool:
        """Whether the group waits here held from raw record `src`: that record read again (a refetch of records
        the guard took for undelivered, a replay) is the same hold, not a second record of the group."""
        raw = self.table.get(group_id.encode())
        return raw is not None and raw[0] == WAITING and unpack(raw).src == src

    async def _index(self, g: GroupView, src: str, p: int, skip: dict | None = None) -> int:
        """One index record per sample still waiting for its reward (less those in `skip`); how many were sent."""
        sent = 0
        for i, s in enumerate(g.samples):
            if s.reward is None and not (skip and i in skip):
                key = s.experience_id.encode()
                await self.emit.send("join", key, index_value(g.group_id, p, i), self.emit.key_partition("join", key),
                                     [(H_KIND, b"exp"), (H_SRC, src.encode())], src)
                sent += 1
        return sent

    def grade(self, group_id: bytes, sample: int, feedback: bytes, p: int, src: str, experience: bytes,
              resend: bool = False) -> Held | None:
        """Record one grade (from feedback record `src`, for `experience`, sample `sample` of the group); the held
        group when it is now complete (to be released), else None. A grade for a group not held (yet) waits for
        it (EARLY). Raises Late when the group was already released (its TTL passed while the grade was on its way)."""
        raw = self.table.get(group_id)
        if raw is None or raw[0] == EARLY:
            h = unpack(raw) if raw is not None else Held(EARLY, now_ms(), p)
            h.grades.setdefault(sample, early(EarlyGrade(src, experience, feedback, resend)))
            self.table[group_id] = pack(h)
            return None
        if raw[0] == DONE:
            raise Late(self._late_detail(group_id, sample, feedback, "was released (feedback_ttl_s "
                                         f"{self.cfg.streams.feedback_ttl_s:g} s passed) before this grade reached it"))
        h = unpack(raw)
        h.grades.setdefault(sample, feedback)
        if len(h.grades) < self._waiting(h):
            self.table[group_id] = pack(h)
            return None
        return h

    def _late_detail(self, group_id: bytes, sample: int, feedback: bytes, what: str) -> str:
        """The rejection names the answer the grade was for (what a person grading looks up) and its group."""
        try:
            eid = getattr(self.codec.decode(feedback), "experience_id", None) or f"sample {sample}"
        except DecodeError:
            eid = f"sample {sample}"
        return f"experience {eid}: its group {group_id.decode(errors='replace')} {what}"

    def _waiting(self, h: Held) -> int:
        g = self.codec.decode(h.data)
        return sum(1 for s in g.samples if s.reward is None)

    def release(self, h: Held) -> bytes:
        """The group with its grades applied, encoded; the table keeps a DONE marker for it."""
        g = self.codec.decode(h.data)
        assert isinstance(g, ExperienceGroup)
        pairs: dict[str, int] = {}
        for i, fb_bytes in h.grades.items():
            fb = self.codec.decode(fb_bytes)
            if not isinstance(fb, Feedback) or not 0 <= i < len(g.samples):
                continue
            e = g.samples[i]
            grade = next((x for x in grades(fb, tuple(self.cfg.streams.rating_scale))
                          if x.experience_id == e.experience_id), None)
            if grade is None:
                continue
            apply_grade(e, grade)
            if grade.pair_id is not None:
                pairs[grade.pair_id] = pairs.get(grade.pair_id, 0) + 1
        both = [pair for pair, n in pairs.items() if n == 2]
        if both:
            g.metadata = {**g.metadata, "preference_pair": both[0]}
        self.table[g.group_id.encode()] = pack(Held(DONE, now_ms(), h.partition))
        self.counters.inc("joined_groups")
        return self.codec.encode(g, topic_context(self.cfg.topics.raw.name))  # (decided as its raw record)

    def expired(self, partition: int) -> tuple[list[Held], list[tuple[bytes, int, EarlyGrade]]]:
        """Past the feedback TTL in this partition: the waiting groups (to be released with what they have), and
        the grades whose group never came, as (group id, sample, grade) (to be rejected; their entries are gone).
        DONE markers past it are forgotten."""
        cutoff = now_ms() - self.cfg.streams.feedback_ttl_s * 1000
        groups, orphans, gone = [], [], []
        for key, raw in self.table.items():  # (not listed first: a week's table is too big to copy)
            _, arrived_ms, part = struct.unpack_from(">Bqi", raw)  # (the head only: most entries are not due)
            if part != partition or arrived_ms >= cutoff:
                continue
            h = unpack(raw)
            if h.state == WAITING:
                groups.append(h)
                continue
            if h.state == EARLY:
                orphans += [(key, i, unearly(b)) for i, b in sorted(h.grades.items())]
            gone.append(key)
        for key in gone:
            del self.table[key]
        return groups, orphans

    def never_came(self, group_id: bytes, sample: int, g: EarlyGrade) -> str:
        """The rejection detail of a grade whose group never came within the TTL."""
        return self._late_detail(group_id, sample, g.feedback, f"did not arrive within feedback_ttl_s "
                                 f"{self.cfg.streams.feedback_ttl_s:g} s of this grade")

    def waiting(self) -> tuple[int, int]:
        """(groups waiting for grades, grades waiting for their group) in one scan of the table."""
        groups = early_ = 0
        for raw in self.table.values():
            groups += raw[0] == WAITING
            early_ += raw[0] == EARLY
        return groups, early_
