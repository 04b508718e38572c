"""The streams worker's checkpoint: the one object that decides what every input partition may commit.

The shape is quixstreams' `Checkpoint`: outputs are flushed before offsets are committed, and an offset is
committed only when every input below it has its outcome in the log. Faust drives the commit (every
`streams.commit_interval_s` it flushes the producer, then asks `_new_offset` per partition; the worker's consumer (transport.py)
routes that question here for every topic the worker reads: raw, joined, the join topic and feedback), so this
object keeps the state the answer needs and the order of the steps:

1. **begin** (each record, `begin`): the first offset this assignment read (where the commit rule counts
   from; for a partition this app never committed, its log start), the record reported to the hole finder,
   and the partition's recovery scan on its first record (what already went out, read back from the
   outputs' headers, behind a fence where partitions are replicated).
2. **write** (`watch`): each output's delivery is watched; a refused write is retried, then quarantined.
3. **commit** (`next_offset`, from Faust): nothing of a partition while one of its writes is being retried;
   else the run of acked offsets from the next offset to read, never past one that was not delivered.
4. **revoke** (`revoke`): what this worker knew of the partitions it lost is forgotten; the next owner
   scans again.
5. **check** (`check`, every 2 s): offsets fetched but never delivered are fetched again.

Its parts: commit_rule.py, holes.py (DeliveryGuard), landed.py (recovery scan), deliveries.py. The package
imports without Faust or aiokafka (`rftbus run`'s summary reads the quarantine file through it, in any install).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from confluent_kafka import KafkaException

from rftbus.streams.checkpoint.commit_rule import next_commit
from rftbus.streams.checkpoint.deliveries import Deliveries, Write
from rftbus.streams.checkpoint.holes import DeliveryGuard
from rftbus.streams.checkpoint.landed import Landed, scan

log = logging.getLogger("rftbus.streams.checkpoint")

__all__ = ["Checkpoint", "Deliveries", "DeliveryGuard", "Landed", "Write"]


class Checkpoint:
    def __init__(self, cfg: Any, topics: set[str], watched: set[str], outputs: Callable[[str, int], list[tuple[str, int]]],
                 deliveries: Deliveries | None, counters: Any, scopes: dict[str, str] | None = None,
                 redo_topics: frozenset[str] = frozenset()):
        """topics: the input topics, whose commits follow the rule; watched: those whose every fetched offset
        must be delivered (all of them at least once; under exactly_once transaction markers are real gaps
        in the internal topics); outputs(scope, p): the (topic, partition) the scan of scope's partition p reads; scopes:
        topic -> the name of the recovery scan its partitions share (raw and joined: one, the ingest agent's;
        default: a scan per topic); redo_topics: inputs whose replays make their state changes again even where
        their outputs all landed (landed.py `scan`)."""
        self.cfg, self.topics, self.watched, self.outputs = cfg, topics, watched, outputs
        self.deliveries, self.counters = deliveries, counters
        self.scopes = dict(scopes or {})
        self.redo_topics = redo_topics
        self.first_seen: dict[Any, int] = {}  # tp -> first offset read since its assignment
        self.landed: dict[tuple[str, int], Landed] = {}  # (scope, input partition) -> what already went out
        self.guard: DeliveryGuard | None = None

    def attach(self, consumer: Any) -> None:
        """The Faust consumer whose positions the hole finder reads (an agent's stream exists by now); once."""
        if self.guard is None:
            self.guard = DeliveryGuard.for_faust(consumer, self.watched, quiet_s=self.cfg.streams.redelivery_quiet_s)

    # -- 1. begin ---------------------------------------------------------------------------------------------
    async def begin(self, msg: Any) -> Landed:
        """Every record of an input topic, before it is handled: what already went out for its partition."""
        from aiokafka.errors import KafkaError

        guard = self.guard if msg.topic in self.watched else None
        if msg.tp not in self.first_seen:
            begin = None
            if guard is not None:  # the commit rule and the guard both count from where this assignment began
                try:  # (all assigned partitions at once: one request at start-up, not one per partition)
                    await guard.learn_starts({msg.tp} | guard.assigned())
                except (KafkaError, asyncio.TimeoutError) as exc:  # the broker: the agent retries the record
                    raise KafkaException(f"log start of {msg.topic}[{msg.partition}] not read: {exc}") from exc
                begin = guard.begin(msg.tp)
            self.first_seen[msg.tp] = msg.offset if begin is None else min(begin, msg.offset)
        if guard is not None:
            guard.delivered(msg.tp, msg.offset)
        return self.landed_of(msg.topic, msg.partition) or await self._recover(
            msg.topic, msg.partition, int((msg.timestamp or time.time()) * 1000))

    def scope(self, topic: str) -> str:
        return self.scopes.get(topic, topic)

    def landed_of(self, topic: str, p: int) -> Landed | None:
        return self.landed.get((self.scope(topic), p))

    async def _recover(self, topic: str, p: int, first_ts_ms: int) -> Landed:
        since = first_ts_ms - int(self.cfg.streams.recovery_margin_s * 1000)
        t = time.monotonic()
        landed = await asyncio.get_running_loop().run_in_executor(
            None, lambda: scan(self.cfg, self.outputs(self.scope(topic), p), p, since, redo_topics=self.redo_topics))
        self.landed[(self.scope(topic), p)] = landed
        self.counters.inc("recovery_scans")
        log.info("%s partition %s: recovery scan read %s records in %.2fs, %s sources already out",
                 self.scope(topic), p, landed.scanned, time.monotonic() - t, len(landed.done))
        return landed

    # -- 2. write ---------------------------------------------------------------------------------------------
    def watch(self, fut: Any, write: Write) -> None:
        if self.deliveries is not None:
            self.deliveries.watch(fut, write)

    # -- 3. commit --------------------------------------------------------------------------------------------
    def next_offset(self, consumer: Any, tp: Any) -> int | None:
        """Faust's question, for an input partition: the offset to commit now, or None."""
        if self.deliveries is not None and any(self.deliveries.holds(t, tp.partition) for t in self.scope_topics(tp.topic)):
            return None  # (a write of raw p held holds joined p too: their tables' changes must commit as one)
        return next_commit(consumer, tp, self.first_seen.get(tp))

    def scope_topics(self, topic: str) -> list[str]:
        """The input topics whose partition p shares `topic`'s recovery scan (raw and joined), `topic` first. One of
        them held holds them all: the tables' changes of a partition come from both in the order they were read, so
        committing joined p past records read after a held raw p record would recover a change made on top of one
        that is skipped and redone (rftbus/streams/state.py)."""
        return [topic] + [t for t in sorted(self.topics) if t != topic and self.scope(t) == self.scope(topic)]

    def commit_rules(self) -> dict[str, Callable[[Any, Any], int | None]]:
        return {topic: self.next_offset for topic in self.topics}

    # -- 4. revoke --------------------------------------------------------------------------------------------
    def revoke(self, tps: set[Any]) -> None:
        mine = {tp for tp in tps if tp.topic in self.topics}
        for tp in mine:
            self.first_seen.pop(tp, None)
        if self.guard is not None:
            self.guard.forget(mine)
        for tp in mine:
            self.landed.pop((self.scope(tp.topic), tp.partition), None)

    # -- 5. check ---------------------------------------------------------------------------------------------
    async def check(self) -> None:
        from aiokafka.errors import KafkaError

        if self.guard is None:
            return
        try:
            await self.guard.learn_starts()
        except (KafkaError, asyncio.TimeoutError) as exc:  # the broker: the next check asks again
            log.warning("delivery guard: log start offsets not read (%s); checking again in 2 s", exc)
        self.guard.check()

    def stats(self) -> dict[str, int]:
        return dict(self.guard.stats) if self.guard is not None else {}
