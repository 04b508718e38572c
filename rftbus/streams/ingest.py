"""The ingest agent: one group record in, its outputs out (curated lane, rejections, a promoted copy).

Each raw record is one whole group, so it is decided on its own and acked at once, in offset order:
verify the record and each sample, then advantages, filters, priority and lane (curate.py), then the
outputs. A live group still waiting for feedback is held instead (live.py) and decided when its grades
come back on `<app_id>-joined`, which raw is co-partitioned with.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from rftbus.streams.checkpoint import Checkpoint, Landed
from rftbus.streams.checkpoint.landed import done_key
from rftbus.streams.curate import Decision, decide
from rftbus.streams.join import ScanClock
from rftbus.streams.live import Late, LiveGroups
from rftbus.streams.outputs import H_EXP, H_KIND, H_RESEND, H_SAMPLE, H_SRC, H_T0, Output
from rftbus.streams.topology import OUTPUT_ROLES
from rftbus.ground.schemas.verify import Drop, Verdict, needs_feedback, placement, read_group, sample_drops
from rftbus.ground.schemas.view import GroupReader, GroupView
from rftbus.ground.images import verified_refusal
from rftbus.ground.weights.staleness import bound, is_stale


def output_partitions(emit, join_topic: str, spans_topic: str | None = None) -> Any:
    """(scope, p) -> the (topic, partition) input partition p writes to: what its recovery scan reads. The join's
    grades go to the joined partition of their group's raw partition, so its scan reads every joined partition; the
    traces stage writes each group and grade to the partition its key hashes to, so its scan reads all of raw and
    feedback."""
    def outputs(scope: str, p: int) -> list[tuple[str, int]]:
        out = [(emit.names[role], emit.part(role, p)) for role in OUTPUT_ROLES]
        if scope == join_topic:
            out += [(emit.names["joined"], q) for q in range(emit.partitions["joined"])]
        if spans_topic is not None and scope == spans_topic:
            out += [(emit.names[role], q) for role in ("raw", "feedback") for q in range(emit.partitions[role])]
        return out

    return outputs


class Ingest:
    def __init__(self, cfg, emit, codec, follower, pass_rates, counters, raw_topic: str, live: LiveGroups,
                 raw_partitions: int):
        self.cfg = cfg
        self.sc = cfg.streams
        self.emit = emit
        self.read = GroupReader(codec)  # skims current-schema records, decodes the rest
        self.follower = follower
        self.pass_rates = pass_rates
        self.counters = counters
        self.raw_topic = raw_topic
        self.raw_partitions = raw_partitions
        self.live = live
        self.checkpoint: Checkpoint | None = None  # what went out, what may be committed (set by the app)
        self.stream: Any = None  # the noack Faust stream, set by the agent
        self.scans = ScanClock(self.sc)  # expiry scans of the live table, per partition

    # -- events --------------------------------------------------------------------------------
    async def handle(self, event) -> None:
        msg = event.message
        p = msg.partition
        assert self.checkpoint is not None, "the app sets the checkpoint before the agent runs"
        landed = await self.checkpoint.begin(msg)
        headers = dict(msg.headers or [])
        kind = headers.get(H_KIND)
        if kind == b"tick":
            # (a tick scans too: after a restart, a partition with no new records still has held groups
            # whose TTL must pass; their release outputs are found by the scan if a crash cut them short)
            await self.tick(p, landed)
        else:
            if msg.topic == self.raw_topic:
                src = f"{msg.topic}/{p}/{msg.offset}"
                t0 = headers.get(H_T0) or (str(int(msg.timestamp * 1000)).encode() if msg.timestamp else None)
                await self.on_raw(p, src, msg.value, msg.key, t0, landed)
            elif kind == b"grade":
                await self.on_grade(p, msg, headers, landed)
        await self.stream.ack(event)

    async def on_raw(self, p: int, src: str, data: bytes | None, key: bytes | None, t0: bytes | None,
                     landed: Landed) -> None:
        self.counters.inc("raw_in")
        if src in landed.done:
            self.counters.inc("replays_skipped")
            self.counters.inc("raw_replays_skipped")
            return
        v = read_group(data, self.read, self.sc.max_message_bytes, self.sc.max_n_samples)
        if not v.ok:
            await self._reject_whole(v, src, data, key, p, landed)
            return
        g = v.group
        assert g is not None
        misplaced = placement(key, g.group_id, p, self.raw_partitions)
        if misplaced is not None:
            await self._reject_whole(Verdict(g, "bad_key", misplaced), src, data, key, p, landed)
            return
        if g.images:
            # over the bounds, a uri not the store's, a referenced file missing or of another size, inline bytes
            # that do not hash to their sha256; a referenced image's bytes are hashed by the trainer that reads them
            bad = verified_refusal(g.images, self.cfg, read_references=False)
            if bad is not None:
                await self._reject_whole(Verdict(g, bad.reason, bad.detail), src, data, key, p, landed)
                return
        if g.group_id in landed.groups and src not in landed.partial and not self.live.holds(g.group_id, src):
            await self._reject_whole(Verdict(g, "duplicate", f"group {g.group_id} already arrived in an earlier "
                                             "record"), src, data, key, p, landed)
            return
        c = self.counters
        complete = None  # a live group whose grades all came before it: released at once
        if needs_feedback(g):
            held, complete = await self.live.hold(g, src, p, t0)
            landed.groups.add(g.group_id)  # (after the step that may raise: a retried record is no duplicate)
            if not held:
                c.inc("replays_skipped")
                c.inc("raw_replays_skipped")
                return
            c.inc("held")
            c.inc("waiting", g.size)
        else:
            c.inc("decided_from_raw")
        c.inc("verified")
        c.inc("experiences_in", g.size)
        if not needs_feedback(g):
            await self.curate(p, src, g, t0, landed)
            landed.groups.add(g.group_id)
        elif complete is not None:
            await self._release(p, complete, landed)

    async def on_grade(self, p: int, msg, headers: dict, landed: Landed) -> None:
        src, exp = headers[H_SRC].decode(), headers.get(H_EXP, b"")
        ident = done_key(src, exp.decode(errors="replace"))
        if ident in landed.done:  # applied or rejected already, read again (a refetch): once is its outcome
            self.counters.inc("replays_skipped")
            return
        try:
            h = self.live.grade(msg.key, int(headers[H_SAMPLE]), msg.value, p, src, exp, bool(headers.get(H_RESEND)))
        except Late as e:
            if headers.get(H_RESEND):  # a grade sent again after a crash that had landed the first time
                self.counters.inc("grade_resends_late")
                return
            await self._reject_grade(p, src, exp, msg.key, msg.value, str(e), landed)
            return
        if headers.get(H_T0):
            self.counters.join_latency(time.time() * 1000 - int(headers[H_T0]))
        if h is not None:
            await self._release(p, h, landed)
        landed.done.add(ident)  # (a grade read again after its group was released is no late grade)

    async def _reject_grade(self, p: int, src: str, exp: bytes, key: bytes, original: bytes, detail: str,
                            landed: Landed) -> None:
        """A grade its group cannot take: `feedback_expired`, once per (feedback record, experience) (a replay of
        the grade finds the rejection in the log)."""
        ident = done_key(src, exp.decode(errors="replace"))
        if ident in landed.done:
            self.counters.inc("replays_skipped")
            return
        self.counters.reject("feedback_expired", "feedback")
        await self.emit.reject(reason="feedback_expired", detail=detail, stage="feedback", src=src, original=original,
                               key=key, p=p, exp=exp.decode(errors="replace"))
        landed.finished(ident)

    async def _release(self, p: int, h, landed: Landed) -> None:
        data = self.live.release(h)
        g = self.read(data)
        assert isinstance(g, GroupView)
        self.counters.inc("waiting", -g.size)
        if h.src in landed.done:
            self.counters.inc("replays_skipped")
            return
        await self.curate(p, h.src, g, h.t0 or None, landed)

    async def curate(self, p: int, src: str, g: GroupView, t0: bytes | None, landed: Landed) -> None:
        latest = landed.latest_for(src)
        if latest is None:
            latest = self.follower.version
            newest = max(s.model_version for s in g.samples)
            if newest > latest:  # usually a race with the trainer's publish, not an unknown version
                latest = await self.follower.wait_for(newest, self.sc.version_wait_s)
        drops = sample_drops(g, latest, self.sc)
        limit = bound(self.cfg.rl, g.source)
        d = decide(g, drops, latest=latest, max_staleness=limit, cfg=self.sc,
                   pass_rates=self.pass_rates.of(p))  # (the partition's own: recovered with its inputs)
        outs = self._outputs(g, d, src)
        await self.emit.outputs(outs, src=src, p=p, latest=latest, t0=t0, landed=landed.indices(src))
        landed.finished(src)
        for drop in d.drops.values():
            self.counters.reject(drop.reason, drop.stage)
        self.counters.inc("rejected_experiences", len(d.drops))
        self.counters.inc("groups_decided")
        if d.survivors:
            self.counters.inc("curated", len(d.survivors))
            eta = self.cfg.rl.max_staleness
            if limit > eta:  # (only a group whose bound is past η can keep rows past it: not on the rollouts' path)
                past = sum(1 for i in d.survivors if is_stale(g.samples[i].model_version, latest, eta))
                self.counters.inc("graded_past_eta", past)
            self.counters.inc("curated_groups")
            if d.priority_lane:
                self.counters.inc("curated_priority", len(d.survivors))
        if d.promoted is not None:
            self.counters.inc("expert_promoted")

    def _outputs(self, g: GroupView, d: Decision, src: str) -> list[Output]:
        """Rejections (one per reason, naming its samples), the promoted copy, then the curated group.
        A curated record over its topic's limit becomes a `too_large` rejection of its survivors (the raw
        record fitted, but advantages and headers make the output a little bigger)."""
        key = g.group_id.encode()
        outs = []
        curated: bytes | None = None
        lane_role = "curated_priority" if d.priority_lane else "curated"
        if d.survivors:
            lane = "priority" if d.priority_lane else "normal"
            curated = self.read.write(g, {"survivors": d.survivors, "priority": d.priority,
                                          "metadata": {**g.metadata, "lane": lane}},
                                      {i: {"advantage": a} for i, a in d.advantages.items()})
            if not self.emit.fits(lane_role, curated):
                limit = self.emit.max_bytes[lane_role]
                for i in d.survivors:
                    d.drops[i] = Drop("too_large", f"curated record of {len(curated)} bytes > {limit} bytes that "
                                                   f"topic {self.emit.names[lane_role]} takes", "streams")
                d.survivors, d.promoted, curated = [], None, None
        by_reason: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, drop in sorted(d.drops.items()):
            by_reason[(drop.reason, drop.stage)].append(i)
        for (reason, stage), idx in by_reason.items():
            details = sorted({d.drops[i].detail for i in idx})
            detail = details[0] if len(details) == 1 else "; ".join(f"#{i}: {d.drops[i].detail}" for i in idx)
            evidence = g.data if stage == "verify" else None  # a sample that is wrong, not just unwanted
            outs.append(Output("rejected", key, self.emit.rejection(
                reason=reason, detail=detail, stage=stage, src=src, original=evidence, group_id=g.group_id,
                experience_ids=g.ids(idx))))
        if curated is None:
            return outs
        if d.promoted is not None:
            # A promoted copy is a new record (its own stable ids): the trainer may learn from the original
            # as an RL sample and from the copy as a demonstration, each exactly once.
            s = g.samples[d.promoted]
            copy = self.read.single(
                g, d.promoted, {"group_id": f"{g.group_id}:expert", "survivors": [], "priority": 0.0,
                                "metadata": {**g.metadata, "promoted": "1", "promoted_from": s.experience_id}},
                {"experience_id": f"{s.experience_id}:expert", "advantage": None})
            if self.emit.fits("expert", copy):  # (a copy is extra: one that does not fit is not made)
                outs.append(Output("expert", f"{g.group_id}:expert".encode(), copy))
            else:
                d.promoted = None
        outs.append(Output(lane_role, key, curated))
        return outs

    async def _reject_whole(self, v: Verdict, src: str, data: bytes | None, key: bytes | None, p: int,
                            landed: Landed) -> None:
        g = v.group
        value = self.emit.rejection(reason=v.reason or "malformed", detail=v.detail, stage="verify", src=src,
                                    original=data, group_id=g.group_id if g else None,
                                    experience_ids=g.ids() if g else ())
        await self.emit.outputs([Output("rejected", key, value)], src=src, p=p, latest=self.follower.version,
                                landed=landed.indices(src))
        landed.finished(src)
        c = self.counters
        c.inc("records_rejected")
        c.reject(v.reason or "malformed", "verify", max(1, g.size) if g else 1)
        if g is not None:
            c.inc("experiences_in", g.size)
            c.inc("rejected_experiences", g.size)

    async def on_error(self, event, exc: BaseException) -> None:
        """A bug or an unexpected record (already logged and counted by its agent): reject it, keep going."""
        msg = event.message
        src = f"{msg.topic}/{msg.partition}/{msg.offset}"
        if msg.topic == self.raw_topic:
            await self.emit.reject(reason="processing_error", detail=f"{type(exc).__name__}: {exc}", stage="streams",
                                   src=src, original=msg.value, key=msg.key, p=msg.partition)
            self.counters.inc("records_rejected")
            self.counters.reject("processing_error", "streams")
        await self.stream.ack(event)

    async def tick(self, p: int, landed: Landed) -> None:
        if not self.scans.due(p):
            return
        groups, orphans = self.live.expired(p)
        for h in groups:
            await self._release(p, h, landed)
        for key, sample, grade in orphans:  # grades whose group never came
            if grade.resend:
                self.counters.inc("grade_resends_late")
                continue
            await self._reject_grade(p, grade.src, grade.experience, key, grade.feedback,
                                     self.live.never_came(key, sample, grade), landed)

