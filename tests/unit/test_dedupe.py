"""The trainer's exactly-once (rftbus/trainer/dedupe.py), as pure logic: ids decided or pending are repeats."""

from __future__ import annotations

from rftbus.trainer.dedupe import TrainedIds


def test_repeats_across_records_within_a_record_and_after_a_restart():
    t = TrainedIds(window=10)
    assert t.seed([{"experience_ids": ["a", "b"]}, {"experience_ids": ["c"]}]) == 3
    ok, dup = t.claim(("cur", 0, 5), ["a", "d", "d", "e"])
    assert ok == [1, 3] and [k for k, _ in dup] == [0, 2]
    assert "already trained" in dup[0][1] and "pending in this record" in dup[1][1]
    ok, dup = t.claim(("pri", 1, 9), ["e", "f"])  # the same experience on the other lane, still pending
    assert ok == [1] and "pri" not in dup[0][1] and "cur[0]@5" in dup[0][1]
    t.finish(("cur", 0, 5))
    assert t.claim(("exp", 0, 1), ["d"])[0] == []  # decided now
    t.finish(("pri", 1, 9))
    assert len(t) == 6


def test_the_window_forgets_the_oldest():
    t = TrainedIds(window=3)
    t.seed([{"experience_ids": ["a", "b", "c", "d"]}])
    assert len(t) == 3 and t.claim(("k", 0, 0), ["a"])[0] == [0]
