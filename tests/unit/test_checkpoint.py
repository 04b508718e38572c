"""The streams checkpoint (rftbus/streams/checkpoint) as logic: a partition commits nothing while one of its writes is
being retried, then the commit rule's run of acked offsets; what a worker knew of a revoked partition is
forgotten. Faust's bookkeeping and the producer's delivery futures are scripted here; the same object runs
through a real worker and broker in tests/integration/test_offsets.py and test_streams_outcomes.py."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from types import SimpleNamespace

from faust.types import TP
from intervaltree import IntervalTree

from rftbus.ground.config import load_config
from rftbus.streams.checkpoint import Checkpoint, Deliveries, Landed, Write
from rftbus.streams.checkpoint.deliveries import read_quarantine
from rftbus.streams.checkpoint.landed import Recent
from rftbus.streams.telemetry import Counters

RAW0, RAW1, JOINED0 = TP("raw", 0), TP("raw", 1), TP("joined", 0)


class _Book:
    """Faust's per-partition bookkeeping, as the commit rule reads it."""

    def __init__(self, acked: dict, committed: dict):
        self._acked = defaultdict(list, {tp: list(v) for tp, v in acked.items()})
        self._acked_index = defaultdict(set, {tp: set(v) for tp, v in acked.items()})
        self._gap = defaultdict(IntervalTree)
        self._committed_offset = defaultdict(lambda: None, committed)


def _checkpoint(tmp_path, send) -> Checkpoint:
    cfg = load_config(overrides={"state_dir": str(tmp_path)}, environ={})
    counters = Counters()
    deliveries = Deliveries(send, tmp_path, counters, tries=2, backoff_s=0.01)
    return Checkpoint(cfg, {"raw", "joined"}, {"raw"}, lambda scope, p: [("curated", p)], deliveries, counters)


def _write(p: int, offset: int) -> Write:
    return Write("curated", "curated", b"g", b"v", p, [], f"raw/{p}/{offset}")


def test_a_partition_commits_nothing_while_one_of_its_writes_is_retried(tmp_path):
    attempts = []

    async def send(role, key, value, partition, headers):
        attempts.append(partition)
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(RuntimeError("refused")) if len(attempts) == 1 else fut.set_result(None)
        return fut

    async def main():
        cp = _checkpoint(tmp_path, send)
        cp.first_seen.update({RAW0: 10, RAW1: 10})
        book = _Book({RAW0: [10, 11, 12], RAW1: [10, 11]}, {RAW0: 10, RAW1: 10})
        failed = asyncio.get_running_loop().create_future()
        cp.watch(failed, _write(0, 11))
        failed.set_exception(RuntimeError("NOT_ENOUGH_REPLICAS"))
        await asyncio.sleep(0)  # the done callback: a retry starts
        held = cp.next_offset(book, RAW0), cp.next_offset(book, RAW1)
        while cp.deliveries.retrying:  # the retry: its first attempt fails, the second lands
            await asyncio.sleep(0.01)
        return held, cp.next_offset(book, RAW0), cp.deliveries.pending

    (held0, other), after, pending = asyncio.run(main())
    assert held0 is None  # partition 0's write is being retried: nothing of it is committed
    assert other == 12  # partition 1 is not held
    assert after == 13 and not pending  # landed on the retry: the acked run commits
    assert not read_quarantine(tmp_path)


def test_a_retried_write_holds_the_partition_of_the_record_it_was_made_for(tmp_path):
    """A feedback rejection being retried holds its feedback partition, not the raw partition of the same number
    (retries were keyed by partition number alone: raw 0 could commit past nothing, feedback 0 past its record)."""
    async def send(role, key, value, partition, headers):
        await asyncio.sleep(0.05)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def main():
        cp = _checkpoint(tmp_path, send)
        fut = asyncio.get_running_loop().create_future()
        cp.watch(fut, Write("rejected", "rejected", None, b"v", 0, [], "feedback/0/3", ("feedback", 0)))
        fut.set_exception(RuntimeError("NOT_ENOUGH_REPLICAS"))
        await asyncio.sleep(0)
        held = cp.deliveries.holds("feedback", 0), cp.deliveries.holds("raw", 0)
        while cp.deliveries.retrying:
            await asyncio.sleep(0.01)
        return held, cp.deliveries.holds("feedback", 0)

    (feedback0, raw0), after = asyncio.run(main())
    assert feedback0 and not raw0 and not after


def test_a_write_that_never_lands_is_quarantined_and_releases_the_partition(tmp_path):
    async def send(role, key, value, partition, headers):
        raise RuntimeError("TOPIC_AUTHORIZATION_FAILED")

    async def main():
        cp = _checkpoint(tmp_path, send)
        cp.first_seen[RAW0] = 5
        fut = asyncio.get_running_loop().create_future()
        cp.watch(fut, _write(0, 5))
        fut.set_exception(RuntimeError("TOPIC_AUTHORIZATION_FAILED"))
        await asyncio.sleep(0)
        assert cp.deliveries.holds("raw", 0)
        while cp.deliveries.retrying:
            await asyncio.sleep(0.01)
        return cp.next_offset(_Book({RAW0: [5, 6]}, {RAW0: 5}), RAW0)

    assert asyncio.run(main()) == 7
    [q] = read_quarantine(tmp_path)
    assert (q["partition"], q["offset"], q["output"]) == (0, 5, "curated") and "2 retries" in q["reason"]


def test_revoke_forgets_what_the_worker_knew_of_its_partitions(tmp_path):
    async def send(*a):
        raise AssertionError("nothing is written")

    cp = _checkpoint(tmp_path, send)
    cp.first_seen.update({RAW0: 3, RAW1: 4, JOINED0: 0})
    cp.landed.update({("raw", 0): Landed(Recent(60), Recent(60)), ("raw", 1): Landed(Recent(60), Recent(60))})
    cp.revoke({RAW0, JOINED0, TP("feedback", 1)})
    assert cp.first_seen == {RAW1: 4} and set(cp.landed) == {("raw", 1)}
    # before anything of a partition was read there is nothing to commit
    assert cp.next_offset(_Book({RAW0: [3, 4]}, {RAW0: None}), RAW0) is None


def test_begin_counts_from_the_first_record_and_scans_the_partition_once(tmp_path, monkeypatch):
    import rftbus.streams.checkpoint as checkpoint_mod

    scans = []

    def scan(cfg, outputs, p, since, redo_topics=frozenset()):
        scans.append((tuple(outputs), p))
        return Landed(Recent(60), Recent(60))

    monkeypatch.setattr(checkpoint_mod, "scan", scan)

    async def send(*a):
        raise AssertionError

    async def main():
        cp = _checkpoint(tmp_path, send)  # no consumer attached: no hole finder (joined under exactly_once)
        first = await cp.begin(SimpleNamespace(tp=JOINED0, topic="joined", partition=0, offset=7, timestamp=1.0))
        again = await cp.begin(SimpleNamespace(tp=JOINED0, topic="joined", partition=0, offset=8, timestamp=2.0))
        return cp, first, again

    cp, first, again = asyncio.run(main())
    assert first is again and scans == [((("curated", 0),), 0)]
    assert cp.first_seen[JOINED0] == 7


def test_a_held_raw_partition_holds_the_joined_partition_of_its_scope(tmp_path):
    """raw p and joined p change the same tables in the order they are read; one committing past the other's held
    record would recover a table change made on top of a change that is skipped and made again."""
    counters = Counters()

    async def send(*a):
        raise AssertionError

    cfg = load_config(overrides={"state_dir": str(tmp_path)}, environ={})
    cp = Checkpoint(cfg, {"raw", "joined", "feedback"}, {"raw"}, lambda scope, p: [], Deliveries(send, tmp_path, counters, 2, 0.01),
                    counters, scopes={"raw": "ingest", "joined": "ingest"})
    assert cp.scope_topics("joined") == ["joined", "raw"] and cp.scope_topics("feedback") == ["feedback"]
    cp.deliveries.pending[("raw", 0)] = 1  # a write of raw 0's record being retried
    book = _Book({JOINED0: [5, 6]}, {JOINED0: 5})
    cp.first_seen[JOINED0] = 5
    assert cp.next_offset(book, JOINED0) is None
    del cp.deliveries.pending[("raw", 0)]
    assert cp.next_offset(book, JOINED0) == 7
