"""Every offset the fetcher passed must reach the ingest agent; a hole is fetched again.

faust-streaming 0.15.3 drops fetched records on several paths without seeking back: its stream skips
an event whose message was stamped with an older consumer generation or that arrives while flow
control is suspended (the Cython iterator skips without acking, the Python one skips *and* acks), and
`Consumer.getmany` discards records of partitions that are inactive at that moment, after aiokafka
has already advanced the fetch position past them. A rebalance usually seeks back to the committed
offset, but records fetched around a rebalance can be stamped on the wrong side of it. Measured
before this guard: the surviving worker of the two-worker kill test delivered offsets 140..151 of a
partition it took over, never 152..355, then 356 onwards; the commit stuck at 152 and those groups
never reached the curated topic (2 of 14 runs); in the chaos run a restarted worker stopped
curating while raw lag stayed at 135.

Rather than patch each path, the checkpoint reports every delivered offset here (`Checkpoint.begin`). A delivered offset past
the next expected one, a fetch position past it with nothing delivered for `quiet_s`, or a fetch position
past the committed offset (or the log start, for a partition the app never committed) of a partition
that delivered nothing at all since it was assigned, means a hole: the partition is sought back to the
hole (replays are deduplicated downstream). A hole that is still not delivered after `max_tries` seeks
is a real gap in the log (e.g. transaction markers) and is accepted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

log = logging.getLogger("rftbus.streams.checkpoint.holes")


@dataclass
class _Hole:
    offset: int
    since: float
    tries: int


def aiokafka_position(consumer: Any, tp: Any) -> int | None:
    """aiokafka's fetch position for tp, or None when tp is not assigned (revoked meanwhile)."""
    ak = getattr(getattr(consumer, "_thread", None), "_consumer", None)
    sub = getattr(getattr(ak, "_subscription", None), "subscription", None)
    if sub is None or sub.assignment is None or tp not in sub.assignment.tps:
        return None
    state = sub.assignment.state_value(tp)
    return state.position if state.has_valid_position else None


class DeliveryGuard:
    def __init__(self, position: Callable[[Any], int | None], seek: Callable[[Any, int], None],
                 committed: Callable[[Any], int | None], *, assigned: Callable[[], set] = set,
                 earliest: Callable[..., Awaitable[Mapping[Any, int]]] | None = None,
                 quiet_s: float = 10.0, retry_s: float = 10.0, max_tries: int = 3,
                 clock: Callable[[], float] = time.monotonic):
        self.position, self.seek, self.committed, self.assigned = position, seek, committed, assigned
        self.earliest = earliest  # async (*tps) -> {tp: log start offset}
        self.starts: dict[Any, int] = {}  # tp with no committed offset -> its log start (where reading began)
        self.quiet_s, self.retry_s, self.max_tries, self.clock = quiet_s, retry_s, max_tries, clock
        self.next: dict[Any, int] = {}  # tp -> next offset the agent should see
        self.last_at: dict[Any, float] = {}
        self.holes: dict[Any, _Hole] = {}
        self.silent_since: dict[Any, float] = {}  # assigned, nothing delivered yet: since when
        self.stats = {"refetches": 0, "gaps_accepted": 0}

    @classmethod
    def for_faust(cls, consumer: Any, topics: set[str], **kw: Any) -> "DeliveryGuard":
        def seek(tp: Any, offset: int) -> None:
            # What Faust's own Consumer.seek does: move aiokafka's position, and the read mark below
            # which Faust drops records as already delivered (or the re-read records are dropped). The move
            # runs on the consumer thread's own loop: from this thread it raced aiokafka's `fetched_records`,
            # which then deleted a partition's records twice and crashed the worker (KeyError; seen in
            # `rftbus bench restart` with 40,000 index records queued).
            thread = consumer._thread
            thread.thread_loop.call_soon_threadsafe(thread.seek, tp, offset)
            consumer._read_offset[tp] = offset if offset else None
        return cls(lambda tp: aiokafka_position(consumer, tp), seek, lambda tp: consumer._committed_offset.get(tp),
                   assigned=lambda: {tp for tp in consumer.assignment() if tp.topic in topics},
                   earliest=consumer.earliest_offsets, **kw)

    def begin(self, tp: Any) -> int | None:
        """Where this assignment of tp began reading: its committed offset, else (a partition this app never
        committed, read from the start) its log start once learned; None while unknown."""
        committed = self.committed(tp)
        return committed if committed is not None else self.starts.get(tp)

    async def learn_starts(self, tps: Any = None) -> None:
        """The log start of each tp (default: every assigned one) that has no committed offset. Without it a
        new app's partition whose first fetch Faust dropped looked like one that had delivered from its
        start: nothing was fetched again, and the commit rule began at the first offset delivered
        (found by CI: a fresh worker never saw raw offset 0 of a partition, the only record in it)."""
        want = [tp for tp in (self.assigned() if tps is None else tps)
                if tp not in self.starts and self.committed(tp) is None]
        if want and self.earliest is not None:
            t = time.monotonic()
            self.starts.update(await self.earliest(*want))
            log.info("log starts of %d never-committed partitions read in %.3f s", len(want), time.monotonic() - t)

    def delivered(self, tp: Any, offset: int) -> None:
        self.last_at[tp] = self.clock()
        self.silent_since.pop(tp, None)
        hole = self.holes.get(tp)
        if hole is not None:
            if offset == hole.offset:
                del self.holes[tp]
                self.next[tp] = offset + 1
            return  # records before the hole (old queue) or past it (not yet re-read) change nothing
        nxt = self.next.get(tp)
        if nxt is None:
            nxt = self.begin(tp)  # where a (re)assignment starts reading
            if nxt is None or offset < nxt:
                self.next[tp] = offset + 1
                return
            self.next[tp] = nxt
        if offset > nxt:
            self._refetch(tp, nxt, offset - nxt, tries=0)
            return
        self.next[tp] = max(nxt, offset + 1)

    def check(self) -> None:
        """Periodic: holes at the tail (nothing after them was delivered) and holes still open."""
        now = self.clock()
        for tp, nxt in list(self.next.items()):
            hole = self.holes.get(tp)
            if hole is not None:
                if now - hole.since < self.retry_s:
                    continue
                if hole.tries >= self.max_tries:
                    pos = self.position(tp)
                    del self.holes[tp]
                    self.next.pop(tp) if pos is None else self.next.__setitem__(tp, pos)
                    self.stats["gaps_accepted"] += 1
                    log.warning("%s[%s]: offset %s never arrived after %s seeks; taking it as a gap in the log",
                                tp.topic, tp.partition, hole.offset, hole.tries)
                else:
                    self._refetch(tp, hole.offset, None, tries=hole.tries)
                continue
            pos = self.position(tp)
            if pos is not None and pos > nxt and now - self.last_at.get(tp, now) >= self.quiet_s:
                self._refetch(tp, nxt, pos - nxt, tries=0)
        self._check_silent(now)

    def _check_silent(self, now: float) -> None:
        """A partition that delivered nothing at all since it was assigned, although the fetch position
        passed its committed offset: everything fetched was dropped (measured: a partition taken over
        after a kill, whose whole backlog came in one fetch around the rebalance, sat at its commit)."""
        for tp in self.assigned():
            if tp in self.next or tp in self.holes:
                continue
            since = self.silent_since.setdefault(tp, now)
            begin, pos = self.begin(tp), self.position(tp)
            if begin is None or pos is None or pos <= begin or now - since < self.quiet_s:
                continue
            self.next[tp] = begin
            self._refetch(tp, begin, pos - begin, tries=0)

    def forget(self, tps: set[Any]) -> None:
        for tp in tps:
            self.next.pop(tp, None)
            self.last_at.pop(tp, None)
            self.holes.pop(tp, None)
            self.silent_since.pop(tp, None)
            self.starts.pop(tp, None)

    def _refetch(self, tp: Any, offset: int, n: int | None, tries: int) -> None:
        pos = self.position(tp)
        if pos is None:
            self.forget({tp})
            return
        if pos > offset:
            self.seek(tp, offset)
            self.stats["refetches"] += 1
            log.warning("%s[%s]: offset %s was fetched but not delivered%s; fetching from it again",
                        tp.topic, tp.partition, offset, f" ({n} records)" if n else "")
        self.holes[tp] = _Hole(offset, self.clock(), tries + 1)
        self.last_at[tp] = self.clock()
