"""The ingest agent: raw + joined -> verify -> groups -> advantages, filters, priority -> outputs.

raw and `<app_id>-joined` have the same partition count and are subscribed by one agent, so Faust
assigns partition p of both to the same worker: a group whose samples arrive partly from raw and
partly (after feedback) from joined still meets in one GroupBook. Events stay unacked until their
group is closed; see groups.py for why.
"""

from __future__ import annotations

import asyncio
import logging
import time

from rftbus.schemas import Source
from rftbus.streams import offsets
from rftbus.streams.curate import curate
from rftbus.streams.groups import AddResult, GroupBook, OpenGroup, Sample
from rftbus.streams.outputs import H_KIND, H_SRC, H_T0
from rftbus.streams.recovery import Landed, scan
from rftbus.streams.verify import ExperienceReader, check_limits, check_version, decode_experience

log = logging.getLogger("rftbus.streams.ingest")


class Ingest:
    def __init__(self, cfg, emit, codec, follower, pass_rates, counters, raw_topic: str):
        self.cfg = cfg
        self.sc = cfg.streams
        self.emit = emit
        self.read = ExperienceReader(codec)  # skims current-schema records, decodes the rest
        self.follower = follower
        self.pass_rates = pass_rates
        self.counters = counters
        self.raw_topic = raw_topic
        self.books: dict[int, GroupBook] = {}
        self.landed: dict[int, Landed] = {}  # from the recovery scan, per input partition
        self.stream = None  # the noack stream, set by the agent
        self.guard = None  # DeliveryGuard: every fetched offset of `watched` topics must arrive here
        self.watched: set[str] = set()

    def watch(self, guard, topics: set[str]) -> None:
        self.guard, self.watched = guard, topics

    # -- partition lifecycle -------------------------------------------------------------------
    def revoke(self, partitions: set[int]) -> None:
        """Forget what this worker held for partitions it no longer owns (their events are replayed
        by the new owner from the committed offset)."""
        for p in partitions:
            self.books.pop(p, None)
            self.landed.pop(p, None)

    async def _recover(self, p: int, first_ts_ms: int) -> None:
        outputs = {role: (self.emit.names[role], self.emit._part(role, p))
                   for role in ("curated", "curated_priority", "expert", "rejected")}
        since = first_ts_ms - int(self.sc.recovery_margin_s * 1000)
        t = time.monotonic()
        landed = await asyncio.get_running_loop().run_in_executor(None, scan, self.cfg, outputs, p, since)
        self.landed[p] = landed
        book = self.books[p] = GroupBook(self.sc.dedupe_window_s)
        for src in landed.done:
            book.mark_done(src)
        self.counters.inc("recovery_scans")
        log.info("partition %s: recovery scan read %s records in %.2fs, %s sources already out",
                 p, landed.scanned, time.monotonic() - t, len(landed.done))

    # -- events --------------------------------------------------------------------------------
    async def handle(self, event) -> None:
        msg = event.message
        p = msg.partition
        offsets.seen(msg.tp, msg.offset)
        if msg.topic in self.watched:
            self.guard.delivered(msg.tp, msg.offset)
        headers = dict(msg.headers or [])
        if headers.get(H_KIND) == b"tick":
            await self.ack(event)
            if p in self.books:
                await self.tick(p)
            return
        if p not in self.books:
            await self._recover(p, int((msg.timestamp or time.time()) * 1000))
        book = self.books[p]
        from_raw = msg.topic == self.raw_topic
        src = f"{msg.topic}/{p}/{msg.offset}" if from_raw else headers[H_SRC].decode()
        if src in book.done:
            self.counters.inc("replays_skipped")
            await self.ack(event)
            return
        data = msg.value
        if from_raw:
            self.counters.inc("raw_in")
        v = decode_experience(data, self.read, self.sc.max_message_bytes)
        if v.ok:
            e = v.experience
            latest = self.follower.latest
            if e.model_version > latest:
                latest = await self.follower.wait_for(e.model_version, self.sc.version_wait_s)
            v = check_version(e, latest)
        if not v.ok:
            await self._reject_one(v.reason, v.detail, "verify", src, data, msg.key, p, v.experience, book)
            await self.ack(event)
            return
        e = v.experience
        if from_raw:
            self.counters.inc("verified")
            if e.source is Source.live and e.reward is None:
                self.counters.inc("held_for_feedback")
                t0 = headers.get(H_T0) or str(msg.timestamp and int(msg.timestamp * 1000)).encode()
                await self.emit.topics["join"].send(key=e.experience_id.encode(), value=data, headers=[
                    (H_KIND, b"exp"), (H_SRC, src.encode()), (H_T0, t0)])
                await self.ack(event)
                return
        if e.reward is None:
            await self._reject_one("no_feedback", "reward still null after the join", "join", src, data,
                                   msg.key, p, e, book)
            await self.ack(event)
            return
        lim = check_limits(e, self.sc.max_tokens, self.sc.reward_min, self.sc.reward_max)
        sample = Sample(e, data, msg.key, src, event, None if lim.ok else (lim.reason, lim.detail))
        result, group = book.add(sample)
        if result == AddResult.REPLAY:
            self.counters.inc("replays_skipped")
            await self.ack(event)
        elif result in (AddResult.DUPLICATE, AddResult.CLOSED):
            why = book.closed.get(e.group_id, ("", 0))[0] if result == AddResult.CLOSED else ""
            reason = "incomplete_group" if why == "incomplete_group" else "duplicate"
            detail = (f"group {e.group_id} was closed ({why or 'emitted'}) before this sample arrived"
                      if result == AddResult.CLOSED else
                      f"group {e.group_id} already holds sample {e.sample_index} / experience {e.experience_id}")
            await self._reject_one(reason, detail, "filter", src, data, msg.key, p, e, book)
            await self.ack(event)
        elif result == AddResult.COMPLETE:
            await self._close(p, book, group, complete=True)

    async def on_error(self, event, exc: BaseException) -> None:
        """A bug or an unexpected record: report it, reject the record, keep the worker going."""
        msg = event.message
        log.exception("ingest: %s at %s[%s]@%s", type(exc).__name__, msg.topic, msg.partition, msg.offset,
                      exc_info=exc)
        self.counters.inc("errors")
        book = self.books.setdefault(msg.partition, GroupBook(self.sc.dedupe_window_s))
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        await self._reject_one("processing_error", f"{type(exc).__name__}: {exc}", "streams", src, msg.value,
                               msg.key, msg.partition, None, book)
        await self.ack(event)

    async def ack(self, event) -> None:
        await self.stream.ack(event)

    async def _reject_one(self, reason, detail, stage, src, data, key, p, e, book: GroupBook) -> None:
        self.counters.reject(reason, stage)
        await self.emit.reject(reason=reason, detail=detail, stage=stage, src=src, original=data, key=key, p=p,
                               experience_id=e.experience_id if e is not None else None)
        book.mark_done(src)

    async def tick(self, p: int) -> None:
        book = self.books[p]
        for g in book.expired(self.sc.group_timeout_s):
            await self._close(p, book, g, complete=False)
        book.prune()

    async def _close(self, p: int, book: GroupBook, g: OpenGroup, complete: bool) -> None:
        samples = list(g.samples.values())
        if not complete and self.sc.incomplete_policy == "reject":
            outcome = None
        else:
            outcome = curate(samples, latest=self.follower.latest, max_staleness=self.cfg.rl.max_staleness,
                             cfg=self.sc, pass_rates=self.pass_rates, complete=complete)
            if not complete and len(outcome.curated) < 2:
                outcome = None  # nothing worth completing: reject the whole group as incomplete
        landed = self.landed.get(p)
        skip = landed.partial.get(g.group_id, set()) if landed else set()
        expert_done = landed.expert if landed else set()
        n = len(samples)
        group = (g.group_id, n)
        if outcome is None:
            for s in samples:
                if s.src not in skip:
                    self.counters.reject("incomplete_group", "filter")
                    await self.emit.reject(reason="incomplete_group", stage="filter", src=s.src, original=s.data,
                                           detail=f"{len(samples)} of {g.group_size} samples after "
                                                  f"{self.sc.group_timeout_s:g} s", key=s.key, p=p,
                                           experience_id=s.exp.experience_id, group=group)
            why = "incomplete_group"
        else:
            if outcome.promoted is not None and outcome.promoted.src not in expert_done:
                e = outcome.promoted.exp
                # A promoted copy is a new record (its own stable id): the trainer may learn from the
                # original as an RL sample and from the copy as a demonstration, each exactly once.
                promoted = e.copy(experience_id=f"{e.experience_id}:expert",
                                  metadata={**e.metadata, "promoted": "1", "promoted_from": e.experience_id})
                await self.emit.experience("expert", promoted, src=outcome.promoted.src, p=p, group=None)
                self.counters.inc("expert_promoted")
            for r in outcome.rejects:
                if r.sample.src not in skip:
                    self.counters.reject(r.reason, r.stage)
                    await self.emit.reject(reason=r.reason, detail=r.detail, stage=r.stage, src=r.sample.src,
                                           original=r.sample.data, key=r.sample.key, p=p,
                                           experience_id=r.sample.exp.experience_id, group=group)
            role = "curated_priority" if outcome.priority_lane else "curated"
            for s in outcome.curated:
                if s.src not in skip:
                    await self.emit.experience(role, s.exp, src=s.src, p=p, group=group,
                                               t0=_t0(s))
                    self.counters.inc("curated")
                    if outcome.priority_lane:
                        self.counters.inc("curated_priority")
            why = "emitted"
        book.close(g, why)
        self.counters.inc("groups_closed")
        for s in samples:
            await self.ack(s.event)

    def open_samples(self) -> int:
        return sum(len(g.samples) for b in self.books.values() for g in b.open.values())


def _t0(s: Sample) -> bytes | None:
    """The raw record's timestamp, carried to the output for raw -> curated latency measurements."""
    ev = s.event
    if ev is None:
        return None
    h = dict(ev.message.headers or [])
    if H_T0 in h:
        return h[H_T0]
    ts = ev.message.timestamp
    return str(int(ts * 1000)).encode() if ts else None
