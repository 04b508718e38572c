"""The tally's definitions of lost and duplicated, on hand-made ledgers (pure logic, no Kafka)."""

from __future__ import annotations

from rftbus.apps.run.ledger import Checkpoint, LaneRecord, Ledger, RawRecord, RejRecord
from rftbus.apps.chaos.poison import Poison
from rftbus.apps.chaos.reconcile import reconcile

RAW, CUR, EXP = "raw", "cur", "exp"


def ids(o: int) -> list[str]:
    return [f"e{o}a", f"e{o}b"]


def ledger(n_raw=4) -> Ledger:
    """n raw groups of two, each curated whole at the same offset, trained in step 1; versions 0..1."""
    led = Ledger(raw_topic=RAW)
    for o in range(n_raw):
        led.raw[(RAW, 0, o)] = RawRecord(ids(o), f"g{o}", "e0")
        led.lanes.append(LaneRecord((CUR, 0, o), "curated", f"{RAW}/0/{o}", ids(o)))
    led.lineage = [{"step": 1, "rank": 0, "experience_ids": [i for o in range(n_raw) for i in ids(o)],
                    "offsets": [[CUR, 0, o] for o in range(n_raw)]}]
    led.checkpoint = Checkpoint(1, 1, {(CUR, 0): n_raw})
    led.versions = [0, 1]
    led.committed = {(RAW, 0): n_raw}
    return led


def untrain(led: Ledger, o: int) -> None:
    led.lineage[0]["offsets"] = [x for x in led.lineage[0]["offsets"] if x[2] != o]
    led.lineage[0]["experience_ids"] = [i for i in led.lineage[0]["experience_ids"] if i not in ids(o)]


def test_a_clean_ledger_balances():
    t = reconcile(ledger(), [])
    assert (t.lost_total, t.duplicated_total) == (0, 0)
    assert (t.produced, t.trained, t.rejected, t.pending, t.in_flight) == (8, 8, 0, 0, 0)


def test_a_raw_group_streams_committed_past_without_any_output_is_lost():
    led = ledger()
    led.lanes = [r for r in led.lanes if r.pos != (CUR, 0, 2)]
    untrain(led, 2)
    t = reconcile(led, [])
    assert t.lost == {"streams": 2} and t.duplicated_total == 0  # both its experiences


def test_an_experience_missing_from_its_groups_outputs_is_lost():
    led = ledger()
    led.lanes[1].experience_ids = ["e1a"]  # e1b neither curated nor rejected, e1a curated
    led.lineage[0]["experience_ids"].remove("e1b")
    t = reconcile(led, [])
    assert t.lost == {"streams": 1} and t.produced == 8 and t.lost_experiences == 1
    led.rejections.append(RejRecord("r", ["e1b"], "zero_variance", "filter", (RAW, 0, 1)))
    t = reconcile(led, [])
    assert (t.lost_total, t.rejected, t.rejected_by_reason) == (0, 1, {"zero_variance": 1})


def test_a_raw_group_not_yet_read_is_in_flight_not_lost():
    led = ledger()
    led.raw[(RAW, 0, 4)] = RawRecord(ids(4), "g4", "e0")
    t = reconcile(led, [])
    assert t.lost_total == 0 and t.in_flight == 2


def test_a_live_group_streams_holds_for_feedback_is_in_flight_not_lost():
    led = ledger()
    led.raw[(RAW, 0, 4)] = RawRecord(ids(4), "g4", "serve")
    led.committed[(RAW, 0)] = 5  # read and committed: without the live table's word it would be lost
    assert reconcile(led, []).lost_experiences == 2
    led.held = {f"{RAW}/0/4"}
    t = reconcile(led, [])
    assert t.lost_total == 0 and t.in_flight == 2
    assert t.produced == t.trained + t.rejected + t.pending + t.in_flight + t.lost_experiences


def test_curated_twice_or_trained_and_rejected_is_duplicated():
    led = ledger()
    led.lanes.append(LaneRecord((CUR, 0, 4), "curated", f"{RAW}/0/1", ids(1)))  # streams emitted group 1 again
    led.lineage[0]["offsets"].append([CUR, 0, 4])
    led.lineage[0]["experience_ids"] += ids(1)
    led.checkpoint = Checkpoint(1, 1, {(CUR, 0): 5})
    t = reconcile(led, [])
    assert t.duplicated["streams"] == 2 and t.duplicated["lineage_id"] == 2


def test_trainer_rejections_are_idempotent_by_id_but_two_outcomes_are_not():
    led = ledger()
    untrain(led, 3)
    same = RejRecord("r1", ids(3), "stale", "trainer", (CUR, 0, 3))
    led.rejections += [same, same]  # the same rejection produced again after a crash
    t = reconcile(led, [])
    assert (t.lost_total, t.duplicated_total, t.rejected) == (0, 0, 2)
    led.rejections.append(RejRecord("r2", ["e2a"], "stale", "trainer", (CUR, 0, 2)))  # e2a is also trained
    assert reconcile(led, []).duplicated == {"trainer": 1}


def test_positions_decide_between_pending_and_lost():
    led = ledger()
    untrain(led, 3)
    assert reconcile(led, []).lost == {"trainer": 2}  # the checkpoint moved past offset 3
    led.checkpoint = Checkpoint(1, 1, {(CUR, 0): 3})
    t = reconcile(led, [])
    assert t.lost_total == 0 and t.pending == 2


def test_a_lane_record_that_is_no_group_must_be_rejected_once_passed():
    led = ledger()
    led.lanes.append(LaneRecord((CUR, 0, 4), "curated", None, None))  # poison written straight to a lane
    led.checkpoint = Checkpoint(1, 1, {(CUR, 0): 5})
    assert reconcile(led, []).lost == {"trainer": 1}
    led.rejections.append(RejRecord("r", [], "malformed", "trainer", (CUR, 0, 4)))
    assert reconcile(led, []).lost_total == 0


def test_versions_and_lineage_gaps_and_repeats():
    led = ledger()
    led.versions = [0, 1, 1, 3]
    led.lineage.append({"step": 3, "rank": 0, "experience_ids": [], "offsets": []})
    led.checkpoint = Checkpoint(3, 3, {(CUR, 0): 4})
    t = reconcile(led, [])
    assert t.versions["skipped"] == [2] and t.versions["twice"] == [1]
    assert t.lost == {"versions": 1, "lineage": 1} and t.duplicated == {"versions": 1}


def test_poison_on_tasks_must_come_back_as_a_rejection_once_read():
    led = ledger()
    led.committed[("tasks", 0)] = 5
    p = Poison("tasks", "garbage", b"x", None, frozenset({"malformed"}), topic="tasks", partition=0, offset=2)
    assert reconcile(led, [p]).lost == {"poison": 1}
    led.rejections.append(RejRecord("r", [], "malformed", "explorer", ("tasks", 0, 2)))
    t = reconcile(led, [p])
    assert t.lost_total == 0 and t.poison[0]["ok"]


def test_clickhouse_counts_must_match_kafka():
    led = ledger()
    led.topic_counts = {"raw": 8, "curated": 8}
    t = reconcile(led, [], {"raw": 8, "curated": 7})
    assert t.lost == {"clickhouse": 1}
    assert reconcile(led, [], {"raw": 9, "curated": 8}).duplicated == {"clickhouse": 1}


def test_a_forged_version_far_ahead_is_counted_not_listed():
    """A record at version 2·10**12 on the weights topic (#42): the summary grew to 23 GB listing the gap."""
    import time

    led = ledger()
    led.versions = [0, 1, 2, 10**6, 2 * 10**12]
    led.checkpoint = Checkpoint(2, 2, {(CUR, 0): 4})
    t0 = time.monotonic()
    t = reconcile(led, [])
    assert time.monotonic() - t0 < 1.0
    assert t.versions["foreign_count"] == 2 and t.versions["skipped_count"] == 0 and t.lost.get("versions", 0) == 0
    assert any("never published" in n for n in t.notes)
    led.checkpoint = None  # no checkpoint: the newest record is taken as the trainer's, and the gap is only counted
    t = reconcile(led, [])
    assert t.versions["skipped_count"] == 2 * 10**12 + 1 - 5 and len(t.versions["skipped"]) <= 25
    assert t.lost["versions"] == t.versions["skipped_count"]


def test_a_replayed_record_the_trainer_rejected_as_a_duplicate_is_no_duplicate():
    """One replayed curated record (#42): the trainer trains the first, refuses the copy `duplicate`; the books are
    exact, not `duplicated` (that made an otherwise exact run exit 1). A copy that was *also* trained still is."""
    led = ledger()
    led.lanes.append(LaneRecord((CUR, 0, 4), "curated", f"{RAW}/0/1", ids(1)))  # the copy, at a later offset
    led.checkpoint = Checkpoint(1, 1, {(CUR, 0): 5})
    led.rejections.append(RejRecord("rd", ids(1), "duplicate", "trainer", (CUR, 0, 4)))
    t = reconcile(led, [])
    assert t.duplicated_total == 0 and t.lost_total == 0, (t.duplicated, t.examples)
    led.lineage[0]["experience_ids"] += ids(1)  # ... but trained a second time: that is a duplicate
    assert reconcile(led, []).duplicated_total > 0


def test_a_rejection_that_lists_the_first_4096_ids_accounts_for_the_whole_group():
    from rftbus.ground.schemas.bounds import MAX_IDS, fitted_rejection

    led = ledger(n_raw=0)
    big = [f"x{i}" for i in range(10_000)]
    led.raw[(RAW, 0, 0)] = RawRecord(big, "huge", "e0")
    led.committed = {(RAW, 0): 1}
    rej = fitted_rejection(max_bytes=900 * 1024, reason="group_too_large", stage="verify", experience_ids=big)
    assert len(rej.experience_ids) == MAX_IDS
    led.rejections.append(RejRecord(rej.rejection_id, rej.experience_ids, rej.reason, "verify", (RAW, 0, 0)))
    t = reconcile(led, [])
    assert t.lost_total == 0 and t.rejected == 10_000 and t.rejected_by_reason == {"group_too_large": 10_000}
