"""A grade that reaches the ingest before its group (rftbus/streams/live.py EARLY): after a kill -9 the live table is recovered
as of the committed inputs, so a hold whose raw record is read again is not in it while the grade the join made from
its index records is already on `joined`; the restarted agent may read joined first. The grade waits for its group
(found by `rftbus chaos --every-event`: it was rejected `feedback_expired` and the group lost the sample's grade)."""

from __future__ import annotations

import asyncio

from rftbus.apps.bench.synthetic import make_group
from rftbus.ground.schemas import Feedback, FeedbackKind, Source, make_codec
from rftbus.streams import live as L
from rftbus.streams.telemetry import Counters
from rftbus.ground.schemas.view import GroupReader
from tests.conftest import make_config


class _Emit:
    def __init__(self):
        self.sent: list[tuple[str, bytes]] = []

    def key_partition(self, role, key):
        return 0

    async def send(self, role, key, value, p, headers, src):
        self.sent.append((role, key))


def _setup(tmp_path, n=2):
    codec = make_codec(None)
    g = make_group(rewards=[None] * n, response_tokens=4, prompt_tokens=4, seed=3, source=Source.live, group_id="g")
    for k, e in enumerate(g.samples):
        e.experience_id = f"g-{k}"
    emit = _Emit()
    table: dict = {}
    live = L.LiveGroups(make_config(tmp_path, 9092), table, emit, codec, Counters())
    view = GroupReader(codec)(codec.encode(g, None))
    grade = [codec.encode(Feedback(feedback_id=f"f{k}", experience_id=f"g-{k}", kind=FeedbackKind.reward,
                                   reward=float(k)), None) for k in range(n)]
    return live, table, emit, view, grade


def test_grades_before_their_group_complete_it_when_it_comes(tmp_path):
    live, table, emit, view, grade = _setup(tmp_path)
    assert live.grade(b"g", 1, grade[1], 0, "fb/0/1", b"g-1") is None
    assert live.grade(b"g", 0, grade[0], 0, "fb/0/0", b"g-0") is None
    assert table[b"g"][0] == L.EARLY and live.waiting() == (0, 1)
    assert L.published(table[b"g"]) == []  # the books do not count it held
    new, complete = asyncio.run(live.hold(view, "raw/0/7", 0, None))
    assert new and complete is not None and emit.sent == []  # nothing left to wait for: no index records
    assert sorted(complete.grades) == [0, 1] and complete.grades[1] == grade[1] and complete.src == "raw/0/7"


def test_a_group_takes_the_grades_that_came_first_and_waits_for_the_rest(tmp_path):
    live, table, emit, view, grade = _setup(tmp_path, n=3)
    live.grade(b"g", 2, grade[2], 0, "fb/0/2", b"g-2")
    new, complete = asyncio.run(live.hold(view, "raw/0/7", 0, None))
    assert new and complete is None
    assert emit.sent == [("join", b"g-0"), ("join", b"g-1")]  # index records only for the samples still waiting
    assert L.unpack(table[b"g"]).state == L.WAITING and live.waiting() == (1, 0)
    assert live.grade(b"g", 0, grade[0], 0, "fb/0/0", b"g-0") is None
    h = live.grade(b"g", 1, grade[1], 0, "fb/0/1", b"g-1")
    assert h is not None and sorted(h.grades) == [0, 1, 2]


def test_a_grade_whose_group_never_comes_is_an_orphan_at_the_ttl(tmp_path):
    live, table, _emit, _view, grade = _setup(tmp_path)
    live.grade(b"g", 0, grade[0], 1, "fb/1/5", b"g-0")
    live.grade(b"g", 1, grade[1], 1, "fb/1/6", b"g-1", resend=True)
    h = L.unpack(table[b"g"])
    h.arrived_ms -= int(live.cfg.streams.feedback_ttl_s * 1000) + 1000
    table[b"g"] = L.pack(h)
    assert live.expired(0) == ([], [])  # another partition's
    groups, orphans = live.expired(1)
    assert groups == [] and b"g" not in table
    assert [(k, i, e.src, e.experience, e.resend) for k, i, e in orphans] == [
        (b"g", 0, "fb/1/5", b"g-0", False), (b"g", 1, "fb/1/6", b"g-1", True)]
    detail = live.never_came(b"g", 0, orphans[0][2])
    assert "experience g-0" in detail and "did not arrive within feedback_ttl_s" in detail


class _IngestEmit(_Emit):
    """What the ingest writes: rejections by reason (index records as _Emit records them)."""

    def __init__(self):
        super().__init__()
        self.rejected: list[str] = []

    def rejection(self, *, reason, **_kw):
        return reason.encode()

    def fits(self, role, value):
        return True

    async def reject(self, *, reason, **_kw):
        self.rejected.append(reason)

    async def outputs(self, outs, **_kw):
        self.rejected += [o.value.decode() for o in outs if o.role == "rejected"]
        return len(outs)


def test_a_held_groups_raw_record_read_again_is_the_same_hold_and_another_record_of_it_a_duplicate(tmp_path):
    """The delivery guard fetches again records it took for undelivered, some of which Faust had delivered: a held
    live group's raw record read a second time was rejected `duplicate` while the group still waited, and was curated
    too when its grades came (the live kill -9 run with grades held back: 2 DUPLICATED, 139 duplicate rejections)."""
    from rftbus.streams.checkpoint.landed import Landed
    from rftbus.streams.ingest import Ingest

    live, table, _emit, view, _grade = _setup(tmp_path)
    emit = _IngestEmit()
    live.emit = emit
    codec = make_codec(None)
    data = codec.encode(codec.decode(view.data), None)
    follower = type("Follower", (), {"version": 5})()
    ing = Ingest(live.cfg, emit, codec, follower, None, live.counters, "raw", live, raw_partitions=1)
    landed = Landed.empty(live.cfg)
    asyncio.run(ing.on_raw(0, "raw/0/3", data, b"g", None, landed))
    assert L.unpack(table[b"g"]).state == L.WAITING and len(emit.sent) == 2  # held; an index record a sample
    asyncio.run(ing.on_raw(0, "raw/0/3", data, b"g", None, landed))  # the same record, delivered again
    assert emit.rejected == [] and live.counters.c["raw_replays_skipped"] == 1
    asyncio.run(ing.on_raw(0, "raw/0/9", data, b"g", None, landed))  # another record of the same group
    assert emit.rejected == ["duplicate"]


def test_a_grade_read_again_after_it_released_its_group_is_no_late_grade(tmp_path):
    """A grade that completed its group, read again (a refetch of joined), was rejected feedback_expired as if it came
    after the TTL (339 of them in the live kill -9 run with grades held back)."""
    from rftbus.streams.checkpoint.landed import Landed
    from rftbus.streams.ingest import Ingest
    from rftbus.streams.outputs import H_EXP, H_SAMPLE, H_SRC
    from rftbus.streams.priority import PassRates

    live, table, _emit, view, grade = _setup(tmp_path, n=1)
    emit = _IngestEmit()
    live.emit = emit
    codec = make_codec(None)
    follower = type("Follower", (), {"version": 5, "latest_version": lambda self: 5})()
    ing = Ingest(live.cfg, emit, codec, follower, PassRates(0.1), live.counters, "raw", live, raw_partitions=1)
    landed = Landed.empty(live.cfg)
    asyncio.run(ing.on_raw(0, "raw/0/3", codec.encode(codec.decode(view.data), None), b"g", None, landed))
    msg = type("Msg", (), {"key": b"g", "value": grade[0]})()
    headers = {H_SRC: b"fb/0/4", H_EXP: b"g-0", H_SAMPLE: b"0"}
    asyncio.run(ing.on_grade(0, msg, headers, landed))
    assert table[b"g"][0] == L.DONE and emit.rejected == []  # released (curated: the fake's outputs)
    asyncio.run(ing.on_grade(0, msg, headers, landed))  # the same joined record, delivered again
    assert emit.rejected == [] and live.counters.rejected["feedback_expired"] == 0
    asyncio.run(ing.on_grade(0, msg, {**headers, H_SRC: b"fb/0/8"}, landed))  # another grade, after the release
    assert emit.rejected == ["feedback_expired"]
