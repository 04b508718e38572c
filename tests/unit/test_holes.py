"""The hole finder (rftbus/streams/checkpoint/holes.py) as logic: which offsets count as a hole, where the fetch
position is sought back to, when a gap is accepted. Fetch positions and the clock are scripted.

The end-to-end case (a worker taking over partitions after a kill, through Faust and the broker) is
tests/integration/test_streams_recovery.py::test_two_workers_share_partitions_and_one_is_killed.
"""

from __future__ import annotations

import asyncio

from faust.types import TP

from rftbus.streams.checkpoint.holes import DeliveryGuard

RAW3 = TP("raw", 3)


class _Fetcher:
    def __init__(self, committed=None):
        self.pos: dict = {}
        self.seeks: list = []
        self.commit = committed
        self.now = 0.0

    def guard(self, **kw) -> DeliveryGuard:
        def seek(tp, off):
            self.seeks.append((tp, off))
            self.pos[tp] = off
        return DeliveryGuard(self.pos.get, seek, lambda tp: self.commit, clock=lambda: self.now, **kw)


def test_a_hole_in_the_middle_is_fetched_again_from_its_first_offset():
    # what the two-worker kill test showed: 140..151 delivered, 152..355 never, then 356
    f = _Fetcher(committed=140)
    g = f.guard()
    f.pos[RAW3] = 436
    for off in range(140, 152):
        g.delivered(RAW3, off)
    g.delivered(RAW3, 356)
    assert f.seeks == [(RAW3, 152)]
    for off in range(152, 436):  # the re-read (356.. again is a replay, deduplicated downstream)
        g.delivered(RAW3, off)
    assert g.holes == {} and g.next[RAW3] == 436


def test_a_leading_hole_after_assignment_counts_from_the_committed_offset():
    f = _Fetcher(committed=100)
    g = f.guard()
    f.pos[RAW3] = 300
    g.delivered(RAW3, 250)
    assert f.seeks == [(RAW3, 100)]


def test_in_order_delivery_never_seeks():
    f = _Fetcher(committed=0)
    g = f.guard()
    for off in range(50):
        f.pos[RAW3] = off + 1
        g.delivered(RAW3, off)
        f.now += 1
        g.check()
    assert f.seeks == [] and g.stats["refetches"] == 0


def test_a_tail_hole_is_found_by_the_periodic_check_after_the_quiet_time():
    f = _Fetcher(committed=0)
    g = f.guard(quiet_s=10)
    for off in range(10):
        g.delivered(RAW3, off)
    f.pos[RAW3] = 60  # 10..59 fetched, none delivered, nothing after them
    f.now = 5
    g.check()
    assert f.seeks == []  # may still be on its way through the agent's queue
    f.now = 11
    g.check()
    assert f.seeks == [(RAW3, 10)]


def test_a_real_gap_is_accepted_after_max_tries():
    f = _Fetcher(committed=0)
    g = f.guard(retry_s=10, max_tries=3)
    f.pos[RAW3] = 20
    g.delivered(RAW3, 0)
    g.delivered(RAW3, 2)  # offset 1 is a transaction marker: it never arrives
    for t in (11, 22, 33):
        f.pos[RAW3] = 20
        f.now = t
        g.check()
    assert len(f.seeks) == 3 and g.stats["gaps_accepted"] == 1 and g.holes == {}
    assert g.next[RAW3] == 20


def test_no_seek_forward_when_a_rebalance_already_sought_back():
    f = _Fetcher(committed=0)
    g = f.guard()
    g.delivered(RAW3, 0)
    f.pos[RAW3] = 1  # the rebalance sought back to the committed offset: position below the hole
    g.delivered(RAW3, 5)
    assert f.seeks == [] and RAW3 in g.holes  # the records will come; only watched


def test_a_revoked_partition_is_forgotten():
    f = _Fetcher(committed=0)
    g = f.guard()
    g.delivered(RAW3, 0)
    g.delivered(RAW3, 9)  # position None: not assigned any more
    assert f.seeks == [] and RAW3 not in g.next


def test_a_partition_that_delivered_nothing_since_assignment_is_fetched_from_its_commit():
    """Taken over after a kill, its whole backlog came in one fetch around the rebalance and was dropped:
    the fetch position is at the end, nothing was delivered, nothing new will come."""
    f = _Fetcher(committed=53)
    assigned = {RAW3}
    g = DeliveryGuard(f.pos.get, lambda tp, off: (f.seeks.append((tp, off)), f.pos.__setitem__(tp, off)),
                      lambda tp: f.commit, assigned=lambda: assigned, clock=lambda: f.now, quiet_s=10)
    f.pos[RAW3] = 126
    g.check()  # first seen now
    f.now = 5
    g.check()
    assert f.seeks == []  # records may still be on their way to the agent
    f.now = 11
    g.check()
    assert f.seeks == [(RAW3, 53)] and g.stats["refetches"] == 1
    for off in range(53, 126):
        g.delivered(RAW3, off)
    assert g.holes == {} and g.next[RAW3] == 126


def test_a_caught_up_silent_partition_is_left_alone():
    f = _Fetcher(committed=40)
    g = DeliveryGuard(f.pos.get, lambda tp, off: f.seeks.append((tp, off)), lambda tp: f.commit,
                      assigned=lambda: {RAW3}, clock=lambda: f.now, quiet_s=10)
    f.pos[RAW3] = 40  # nothing new since the commit
    for f.now in (0, 20, 40):
        g.check()
    assert f.seeks == []


def _fresh_guard(f: _Fetcher, log_start: int) -> DeliveryGuard:
    """A partition this app never committed (a new app id): reading began at the log start."""
    async def earliest(*tps):
        return {tp: log_start for tp in tps}
    return DeliveryGuard(f.pos.get, lambda tp, off: (f.seeks.append((tp, off)), f.pos.__setitem__(tp, off)),
                         lambda tp: f.commit, assigned=lambda: {RAW3}, earliest=earliest, clock=lambda: f.now,
                         quiet_s=10)


def test_a_never_committed_partition_whose_only_fetch_was_dropped_is_fetched_from_its_log_start():
    """What CI showed: a new worker's first fetch of a partition (one record, offset 0) never reached the agent;
    with no committed offset the guard had nothing to count from and the record was never processed."""
    f = _Fetcher(committed=None)
    g = _fresh_guard(f, log_start=0)
    f.pos[RAW3] = 1
    asyncio.run(g.learn_starts())
    assert g.begin(RAW3) == 0
    g.check()
    f.now = 11
    g.check()
    assert f.seeks == [(RAW3, 0)]
    g.delivered(RAW3, 0)
    assert g.holes == {} and g.next[RAW3] == 1


def test_a_leading_hole_of_a_never_committed_partition_counts_from_its_log_start():
    f = _Fetcher(committed=None)
    g = _fresh_guard(f, log_start=7)  # retention removed 0..6: auto.offset.reset=earliest began at 7
    f.pos[RAW3] = 20
    asyncio.run(g.learn_starts([RAW3]))
    g.delivered(RAW3, 12)
    assert f.seeks == [(RAW3, 7)]


def test_a_committed_partition_does_not_ask_for_its_log_start():
    asked = []

    async def earliest(*tps):
        asked.extend(tps)
        return {tp: 0 for tp in tps}
    f = _Fetcher(committed=40)
    g = DeliveryGuard(f.pos.get, lambda tp, off: None, lambda tp: f.commit, assigned=lambda: {RAW3},
                      earliest=earliest)
    asyncio.run(g.learn_starts())
    assert asked == [] and g.begin(RAW3) == 40
